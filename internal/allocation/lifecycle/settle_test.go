package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var k client.Client

// TestMain runs the package against a real API server with Cluster API's
// CRDs: a settlement is decided on what the API server says of each kind
// of holder.
func TestMain(m *testing.M) {
	os.Exit(envtest.RunWith(m, []envtest.Option{envtest.WithClusterAPI()}, func(s *envtest.Suite) { k = s.Client }))
}

var ctx = context.Background()

// ipamVersion is the version of Cluster API's IPAM group the suite serves.
const ipamVersion = "v1beta2"

// holderKind is one kind of holder as its writer meets the rule of
// settling in-flight entries: it takes an address under a token, and
// writes its record later.
type holderKind struct {
	name string
	// create makes a holder named id that records nothing, and returns
	// its name in entries and the token its writer takes addresses under.
	create func(t *testing.T, id string) (string, string)
	// record writes the holder's record of ip as its writer does, under
	// token: an error when it is refused.
	record func(id, ip, token string) error
	// change writes the holder without recording anything, so that its
	// writer's token moves on.
	change func(t *testing.T, id string)
	// remove deletes the holder.
	remove func(t *testing.T, id string)
	// exists is whether the pool controller counts the holder as
	// existing while it records nothing (a claim exists for it only
	// through its IPAddress).
	exists bool
	// stalled is what settles the entry of a writer that stalled between
	// its pool write and its record: a record written under the token is
	// fenced, and the entry revoked; a claim's IPAddress, created
	// unconditionally, cannot be fenced, and its entry is kept instead.
	stalled lifecycle.Settlement
}

// kinds are the three kinds of holder.
var kinds = []holderKind{
	{
		name: "enactment",
		create: func(t *testing.T, id string) (string, string) {
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: id + ".p",
				Labels: map[string]string{shared.EnactmentNodeLabel: id, shared.EnactmentPolicyLabel: "p"}}}
			Expect(envtest.CreateForTest(t, k, e)).To(Succeed())
			return e.Name, e.ResourceVersion
		},
		record: func(id, ip, token string) error {
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{}
			if err := k.Get(ctx, client.ObjectKey{Name: id + ".p"}, e); err != nil {
				return err
			}
			e.ResourceVersion = token
			e.Status.IPPool = ippoolv1.EnactmentIPPools{"p": {Allocated: []string{ip}}}
			return k.Status().Update(ctx, e)
		},
		change: func(t *testing.T, id string) { annotate(t, &nncev1beta1.NodeNetworkConfigurationEnactment{}, id+".p") },
		remove: func(t *testing.T, id string) {
			Expect(k.Delete(ctx, &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: id + ".p"}})).To(Succeed())
		},
		exists:  true,
		stalled: lifecycle.Revoke,
	},
	{
		name: "pooled policy's node",
		create: func(t *testing.T, id string) (string, string) {
			p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: id}}
			p.Spec.Capture = map[string]string{"addr": "ippool.p.allocate"}
			p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
			Expect(envtest.CreateForTest(t, k, p)).To(Succeed())
			return holder.ForPolicyNode(id, id+"-1").String(), p.ResourceVersion
		},
		record: func(id, ip, token string) error {
			p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{}
			if err := k.Get(ctx, client.ObjectKey{Name: id}, p); err != nil {
				return err
			}
			p.ResourceVersion = token
			p.Status.Nodes = []ippoolv1.PooledPolicyNode{{Node: id + "-1", Policy: id + "-" + id + "-1",
				Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: "p", IP: ip}}}}
			return k.Status().Update(ctx, p)
		},
		change: func(t *testing.T, id string) { annotate(t, &ippoolv1.PooledNodeNetworkConfigurationPolicy{}, id) },
		remove: func(t *testing.T, id string) {
			Expect(k.Delete(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: id}})).To(Succeed())
		},
		// Its entry is judged on the policy whether or not the node has
		// a record yet.
		exists:  true,
		stalled: lifecycle.Revoke,
	},
	{
		name: "Cluster API claim",
		create: func(t *testing.T, id string) (string, string) {
			c := capi.NewClaim(ipamVersion)
			c.SetNamespace("default")
			c.SetName(id)
			c.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": ippoolv1.GroupVersion.Group, "kind": "NodeIPPool", "name": "p"}}
			Expect(envtest.CreateForTest(t, k, c)).To(Succeed())
			return holder.ForClaim("default", id).String(), string(c.GetUID())
		},
		record: func(id, ip, token string) error {
			c := capi.NewClaim(ipamVersion)
			if err := k.Get(ctx, client.ObjectKey{Namespace: "default", Name: id}, c); err != nil {
				return err
			}
			addr := capi.NewAddress(ipamVersion)
			addr.SetNamespace("default")
			addr.SetName(id)
			addr.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: c.GetAPIVersion(), Kind: c.GetKind(), Name: id,
				UID: c.GetUID(), Controller: ptr.To(true)}})
			addr.Object["spec"] = map[string]any{"address": ip, "prefix": int64(24), "claimRef": map[string]any{"name": id},
				"poolRef": map[string]any{"apiGroup": ippoolv1.GroupVersion.Group, "kind": "NodeIPPool", "name": "p"}}
			return k.Create(ctx, addr) // unconditionally, whatever the token
		},
		change: func(t *testing.T, id string) {
			// A claim's token is its UID: it moves on only when the
			// claim is created again.
			c := capi.NewClaim(ipamVersion)
			Expect(k.Get(ctx, client.ObjectKey{Namespace: "default", Name: id}, c)).To(Succeed())
			Expect(k.Delete(ctx, c)).To(Succeed())
			again := capi.NewClaim(ipamVersion)
			again.SetNamespace("default")
			again.SetName(id)
			again.Object["spec"] = c.Object["spec"]
			Expect(k.Create(ctx, again)).To(Succeed())
		},
		remove: func(t *testing.T, id string) {
			c := capi.NewClaim(ipamVersion)
			c.SetNamespace("default")
			c.SetName(id)
			Expect(k.Delete(ctx, c)).To(Succeed())
		},
		exists:  false,
		stalled: lifecycle.Wait,
	},
}

// annotate writes an annotation on the object named name.
func annotate(t *testing.T, obj client.Object, name string) {
	t.Helper()
	Expect(k.Get(ctx, client.ObjectKey{Name: name}, obj)).To(Succeed())
	obj.SetAnnotations(map[string]string{"example.com/touched": time.Now().String()})
	Expect(k.Update(ctx, obj)).To(Succeed())
}

// settling settles entries as the pool controller does, and keeps the
// Events it emits.
type settling struct {
	settler  lifecycle.Settler
	recorder *events.FakeRecorder
	clock    *clocktesting.FakeClock
	pool     *ippoolv1.NodeIPPool
}

func newSettling() *settling {
	s := &settling{recorder: events.NewFakeRecorder(100), clock: clocktesting.NewFakeClock(time.Now()),
		pool: &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
	s.settler = lifecycle.Settler{Client: k, Reader: k, Recorder: s.recorder, Clock: s.clock, IPAMVersion: ipamVersion}
	return s
}

// settle settles the entry of ip for holderName under token, with what
// the pool controller's cache says of the holder: whether it records ip,
// and whether it exists.
func (s *settling) settle(holderName, ip, token string, recorded, exists bool) lifecycle.Settlement {
	e := ippoolv1.InFlightAddress{IP: ip, Holder: holderName, Token: token, Since: metav1.NewTime(s.clock.Now().Add(-time.Minute))}
	got, err := s.settler.Settle(ctx, s.pool, lifecycle.Entry{InFlightAddress: e, Recorded: recorded, Exists: exists})
	Expect(err).NotTo(HaveOccurred())
	return got
}

// recordsOf returns what the records of every holder, read from the API
// server, say of holderName: whether it records ip.
func recordsOf(holderName, ip string) bool {
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	Expect(k.List(ctx, &enactments)).To(Succeed())
	records, err := holder.List(ctx, k, enactments.Items, holder.Every(nil))
	Expect(err).NotTo(HaveOccurred())
	return slices.ContainsFunc(records, func(r holder.Record) bool {
		return r.Holder.String() == holderName && slices.Contains(r.Pools["p"].Held(), ip)
	})
}

// TestSettleEveryKind is the rule of taking an address, for every kind
// of holder: a writer takes it under a token, records it later, and a
// writer that stalled in between never records an address that was
// handed out again meanwhile. Each case runs for each kind.
func TestSettleEveryKind(t *testing.T) {
	for i, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			ip := func(n int) string { return fmt.Sprintf("10.%d.0.%d", 90+i, n) }
			run := func(name string, f func(t *testing.T)) {
				t.Run(name, func(t *testing.T) {
					RegisterTestingT(t)
					f(t)
				})
			}

			run("recorded: pruned", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "rec")
				Expect(kind.record("rec", ip(1), token)).To(Succeed())
				Expect(recordsOf(name, ip(1))).To(BeTrue())
				Expect(s.settle(name, ip(1), token, true, true)).To(Equal(lifecycle.Prune))
			})

			run("a writer stalled before its record: it can never record it", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "st")
				got := s.settle(name, ip(2), token, false, kind.exists)
				Expect(got).To(Equal(kind.stalled))
				late := kind.record("st", ip(2), token)
				if got == lifecycle.Revoke {
					Expect(late).To(MatchError(apierrors.IsConflict, "IsConflict"), "the fence refuses the late record")
					Expect(recordsOf(name, ip(2))).To(BeFalse())
					Expect(s.recorder.Events).To(Receive(ContainSubstring("NodeIPPool p revoked " + ip(2))))
					Expect(s.settle(name, ip(2), token, false, kind.exists)).To(Equal(lifecycle.Forget),
						"the token is dead once fenced")
					return
				}
				// Kept: the address was never handed out again, and the
				// late record holds it.
				Expect(late).To(Succeed())
				Expect(s.settle(name, ip(2), token, true, true)).To(Equal(lifecycle.Prune))
			})

			run("recorded behind the cache: looked at again", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "bc")
				Expect(kind.record("bc", ip(3), token)).To(Succeed())
				Expect(s.settle(name, ip(3), token, false, kind.exists)).To(Equal(lifecycle.Wait),
					"the API server records it: neither fenced nor forgotten")
				Expect(s.recorder.Events).NotTo(Receive())
			})

			run("holder gone: forgotten", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "gn")
				kind.remove(t, "gn")
				Expect(s.settle(name, ip(4), token, false, false)).To(Equal(lifecycle.Forget))
				Expect(s.settle(name, ip(4), token, false, true)).To(Equal(lifecycle.Forget),
					"gone on the API server while the cache still shows it")
				Expect(s.recorder.Events).NotTo(Receive())
			})

			run("holder recorded another address: forgotten, nothing fenced", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "ot")
				Expect(kind.record("ot", ip(6), token)).To(Succeed())
				Expect(s.settle(name, ip(7), token, false, true)).To(Equal(lifecycle.Forget))
				Expect(s.recorder.Events).NotTo(Receive())
			})

			run("holder moved past the token: forgotten, nothing fenced", func(t *testing.T) {
				s := newSettling()
				name, token := kind.create(t, "mv")
				kind.change(t, "mv")
				Expect(s.settle(name, ip(5), token, false, kind.exists)).To(Equal(lifecycle.Forget))
				Expect(s.recorder.Events).NotTo(Receive())
			})
		})
	}
}

// TestClaimRestoreKeepsItsEntry: a claim's entry under its restore
// annotation is its hold while its IPAddress is made again, even once an
// IPAddress records it (the machine was given the address, whatever
// happens to the IPAddress); the annotation alone holds nothing.
func TestClaimRestoreKeepsItsEntry(t *testing.T) {
	RegisterTestingT(t)
	s := newSettling()
	name, token := kinds[2].create(t, "rs")
	c := capi.NewClaim(ipamVersion)
	Expect(k.Get(ctx, client.ObjectKey{Namespace: "default", Name: "rs"}, c)).To(Succeed())
	c.SetAnnotations(map[string]string{capi.RestoreAnnotation: "10.99.0.1"})
	Expect(k.Update(ctx, c)).To(Succeed())
	Expect(s.settle(name, "10.99.0.1", token, true, true)).To(Equal(lifecycle.Wait))
	Expect(s.settle(name, "10.99.0.2", token, false, false)).To(Equal(lifecycle.Wait), "no IPAddress yet: kept")
	Expect(s.settle(name, "10.99.0.1", "another-uid", false, false)).To(Equal(lifecycle.Forget), "another claim's entry")
}
