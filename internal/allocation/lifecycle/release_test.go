package lifecycle_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// giver is one kind of holder giving an address up, built from the record
// that kind keeps, and what its quarantine must say.
type giver struct {
	name string
	// former is the holder id, on node, giving up ip of pool.
	former func(id, node, pool, ip string) lifecycle.Former
	// holder is the name of the holder id on node in the pool's entries.
	holder func(id, node string) string
	// capture and iface are what the quarantine names: the capture that
	// keeps the address for the holder's return, and its interface.
	capture, iface string
	// nodeUID: whether the quarantine names the Node's UID.
	nodeUID bool
}

// givers are the three kinds of holder.
var givers = []giver{
	{
		name: "enactment",
		former: func(id, node, pool, ip string) lifecycle.Former {
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: node + "." + id,
				Labels:          map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: id},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID("uid-" + node)}}}}
			addr := capture.Address{IP: netip.MustParseAddr(ip), PrefixLength: 24}
			e.Status.IPPool = ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}
			e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{
				"addr": {State: shared.NewState(string(addr.State()))}}
			e.Status.DesiredState = shared.NewState(fmt.Sprintf("interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: %s\n      prefix-length: 24\n", ip))
			return lifecycle.OfEnactment(e)
		},
		holder:  func(id, node string) string { return node + "." + id },
		capture: "addr", iface: "eth1", nodeUID: true,
	},
	{
		name: "pooled policy's node",
		former: func(id, node, pool, ip string) lifecycle.Former {
			p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: id}}
			p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
			rec := &ippoolv1.PooledPolicyNode{Node: node, NodeUID: types.UID("uid-" + node)}
			return lifecycle.OfPolicyNode(p, rec, []ippoolv1.PooledAddress{{Capture: "addr", Pool: pool, IP: ip}})
		},
		holder:  func(id, node string) string { return holder.ForPolicyNode(id, node).String() },
		capture: "addr", iface: "eth1", nodeUID: true,
	},
	{
		name: "Cluster API claim",
		former: func(id, node, pool, ip string) lifecycle.Former {
			return lifecycle.OfClaim(holder.ForClaim("default", id), node, pool, netip.MustParseAddr(ip))
		},
		holder: func(id, _ string) string { return holder.ForClaim("default", id).String() },
		// A claim has no capture, and no desired state of ours puts its
		// address on an interface.
	},
}

// TestReleaseEveryKind is the first step of giving addresses up, for every
// kind of holder: Release quarantines what the holder's record holds in
// the pool whose range hands it out, its bit set, naming the holder, the
// node whose evidence lifts it (and that Node's UID), the interface, and
// the capture that keeps it for the holder's return (Entries says the
// same); again, it adds nothing and keeps the entry's time; without
// return, no capture; an address no pool hands out needs nothing; Confirm
// stamps that holder's quarantines and no other's.
func TestReleaseEveryKind(t *testing.T) {
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	for i, g := range givers {
		t.Run(g.name, func(t *testing.T) {
			RegisterTestingT(t)
			pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("release-%d", i)},
				Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: fmt.Sprintf("10.%d.0.0/24", 70+i)}}}
			Expect(envtest.CreateForTest(t, k, pool)).To(Succeed())
			ip := func(n int) string { return fmt.Sprintf("10.%d.0.%d", 70+i, n) }
			quarantine := func(ip string) *ippoolv1.QuarantinedAddress {
				var p ippoolv1.NodeIPPool
				Expect(k.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(Succeed())
				for _, q := range p.Status.Quarantined {
					if q.IP == ip {
						return &q
					}
				}
				return nil
			}

			f := g.former("a", "node01", pool.Name, ip(5))
			got, err := lifecycle.Release(ctx, w, f)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(ippoolv1.EnactmentIPPools{pool.Name: {Allocated: []string{ip(5)}}}))
			q := quarantine(ip(5))
			Expect(q).NotTo(BeNil())
			Expect(q.Holder).To(Equal(g.holder("a", "node01")))
			Expect(q.Node).To(Equal("node01"))
			Expect(q.Capture).To(Equal(g.capture), "the capture that keeps it for the holder's return")
			Expect(q.Interface).To(Equal(g.iface))
			Expect(q.NodeUID != "").To(Equal(g.nodeUID))
			written := *q
			written.DeprecatedEnactment = "" // the holder's name again, for earlier versions
			Expect(f.Entries(q.Since)).To(Equal([]ippoolv1.QuarantinedAddress{written}), "Entries is what Release writes")
			Expect(bitSet(pool.Name, ip(5))).To(BeTrue())

			again, err := lifecycle.Release(ctx, w, f)
			Expect(err).NotTo(HaveOccurred())
			Expect(again).To(BeEmpty(), "released already")
			Expect(quarantine(ip(5))).To(Equal(q), "the first release's entry stays, with its time")

			gone := g.former("b", "node02", pool.Name, ip(6)).WithoutReturn()
			Expect(lifecycle.Release(ctx, w, gone)).To(HaveLen(1))
			Expect(quarantine(ip(6)).Capture).To(BeEmpty(), "kept for nobody's return")

			outside, err := lifecycle.Release(ctx, w, g.former("c", "node03", pool.Name, "192.0.2.7"))
			Expect(err).NotTo(HaveOccurred())
			Expect(outside).To(BeEmpty(), "no pool hands it out")

			Expect(lifecycle.Confirm(ctx, w, f)).To(Succeed())
			Expect(quarantine(ip(5)).StateSeenAtRelease.Equal(&poolwrite.ReleaseConfirmed)).To(BeTrue(), "confirmed")
			Expect(quarantine(ip(6)).StateSeenAtRelease).To(BeNil(), "another holder's release is not confirmed")
		})
	}
}

// bitSet reads whether pool's bitmap allocates ip.
func bitSet(pool, ip string) bool {
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, client.ObjectKey{Name: pool}, &p)).To(Succeed())
	alloc, err := poolstatus.Allocator(&p)
	Expect(err).NotTo(HaveOccurred())
	return alloc.HasIP(netip.MustParseAddr(ip))
}
