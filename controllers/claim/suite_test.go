package claim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// grace is the garbage collection grace period and the quarantine period
// of the controllers these tests start.
const grace = 3 * time.Second

// version is the IPAM version the tests speak: the CRDs' storage version,
// since envtest serves them without Cluster API's conversion webhook.
const version = "v1beta2"

// defaultTimeout is the suite's Eventually timeout.
const defaultTimeout = 45 * time.Second

var (
	env    *envtest.Env
	k      client.Client
	simBin string
	ctx    = context.Background()
)

// TestMain runs the package on a control plane with Cluster API's IPAM and
// Cluster CRDs from the sigs.k8s.io/cluster-api module, and the NodeIPPool
// webhook served as the pool controller serves it.
func TestMain(m *testing.M) {
	os.Exit(envtest.RunWith(m, []envtest.Option{envtest.WithWebhook(), envtest.WithClusterAPI()}, func(s *envtest.Suite) {
		env, k, simBin = s.Env, s.Client, s.Command("nmstatectl-sim")
		if _, err := env.StartWebhook(); err != nil {
			panic(err) // the suite cannot run without it
		}
	}, "nmstatectl-sim"))
}

func init() {
	SetDefaultEventuallyTimeout(defaultTimeout)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}

// startController runs a pool controller, with its claim controller, until
// the test ends; tune, if given, adjusts it before it starts.
func startController(t *testing.T, tune ...func(*envtest.PoolController)) *envtest.PoolController {
	t.Helper()
	pc, err := env.StartPoolController(grace, nil, tune...)
	Expect(err).NotTo(HaveOccurred())
	Expect(pc.Claims).NotTo(BeNil(), "the IPAM CRDs are installed: the claim controller must run")
	t.Cleanup(func() { _ = pc.Stop() })
	return pc
}

// startStalling runs a pool controller, with its claim controller, until
// the test ends; the creation of IPAddress m1 stalls for stallFor (a slow
// admission webhook, an API server under load) while stall says so, and
// is then refused while refuse says so.
func startStalling(t *testing.T, stallFor time.Duration, stall func() bool, refuse func() bool) {
	t.Helper()
	RegisterTestingT(t)
	pc, err := env.StartPoolController(grace, nil, func(pc *envtest.PoolController) {
		pc.Claims.Client = interceptor.NewClient(envtest.WithoutWatch{Client: pc.Claims.Client}, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if obj.GetObjectKind().GroupVersionKind().Kind != capi.AddressKind || obj.GetName() != "m1" {
					return c.Create(ctx, obj, opts...)
				}
				if stall() {
					select {
					case <-ctx.Done():
					case <-time.After(stallFor):
					}
				}
				if refuse() {
					return apierrors.NewForbidden(schema.GroupResource{Group: "ipam.cluster.x-k8s.io", Resource: "ipaddresses"},
						obj.GetName(), errors.New("refused by the test"))
				}
				return c.Create(ctx, obj, opts...)
			},
		})
	})
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })
}

// begin starts a test: a pool controller, the namespace of its claims
// and an available pool.
func begin(t *testing.T, namespace, pool string, spec ippoolv1.NodeIPPoolSpec) *envtest.PoolController {
	t.Helper()
	RegisterTestingT(t)
	pc := startController(t)
	createNamespace(t, namespace)
	createPool(t, pool, spec)
	return pc
}

// createPool creates an available pool and deletes it when the test ends.
func createPool(t *testing.T, name string, spec ippoolv1.NodeIPPoolSpec) {
	t.Helper()
	envtest.CreateAvailablePool(t, k, name, spec, grace, defaultTimeout)
}

// createNamespace creates a namespace for one test's claims.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	Expect(k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
}

// newClaim returns a claim of pool, as an infrastructure provider writes it.
func newClaim(namespace, name, pool string) *unstructured.Unstructured {
	c := capi.NewClaim(version)
	c.SetNamespace(namespace)
	c.SetName(name)
	c.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": pool}}
	return c
}

// createClaim creates a claim of pool and deletes it when the test ends.
func createClaim(t *testing.T, namespace, name, pool string, adjust ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	return createClaimAs(t, k, namespace, name, pool, adjust...)
}

// createClaimAs is createClaim with as's credentials (a tenant's).
func createClaimAs(t *testing.T, as client.Client, namespace, name, pool string, adjust ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	c := newClaim(namespace, name, pool)
	for _, f := range adjust {
		f(c)
	}
	Expect(as.Create(ctx, c)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, newClaim(namespace, name, pool)) })
	return c
}

// readiness returns "Status Reason: message" of a claim's Ready condition,
// or what is missing.
func readiness(namespace, name string) func() string {
	return condition(namespace, name, capi.ConditionReady)
}

func condition(namespace, name, typ string) func() string {
	return func() string {
		c := capi.NewClaim(version)
		if err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
			return err.Error()
		}
		list, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
		for _, item := range list {
			if m, ok := item.(map[string]any); ok && m["type"] == typ {
				return fmt.Sprintf("%s %s: %s", m["status"], m["reason"], m["message"])
			}
		}
		return "no " + typ + " condition"
	}
}

// addressOf returns the address of the claim's IPAddress, or what is wrong.
func addressOf(namespace, name string) func() string {
	return func() string {
		a, err := getAddress(namespace, name)
		if err != nil {
			return err.Error()
		}
		return capi.AddressOf(a).IP.String()
	}
}

// liveAddress returns the UID of the claim's IPAddress, or "" while there
// is none or it is being deleted.
func liveAddress(namespace, name string) func() types.UID {
	return func() types.UID {
		a, err := getAddress(namespace, name)
		if err != nil || a.GetDeletionTimestamp() != nil {
			return ""
		}
		return a.GetUID()
	}
}

func getAddress(namespace, name string) (*unstructured.Unstructured, error) {
	a := capi.NewAddress(version)
	err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, a)
	return a, err
}

// bits returns the addresses set in a pool's bitmap.
func bits(name string) func() []string {
	return func() []string {
		ips, err := envtest.PoolAddresses(ctx, k, name)
		if err != nil {
			return []string{err.Error()}
		}
		return ips
	}
}

// available returns "Status Reason: message" of the pool's Available
// condition.
func available(name string) func() string {
	return poolCondition(name, ippoolv1.ConditionAvailable)
}

// poolCondition returns "Status Reason: message" of the pool's condition
// typ, or "none".
func poolCondition(name, typ string) func() string {
	return func() string {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, typ)
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// quarantined returns the quarantine entries of a pool as "ip node".
func quarantined(name string) func() []string {
	return func() []string {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, q := range p.Status.Quarantined {
			out = append(out, q.IP+" "+q.Node)
		}
		return out
	}
}

// events returns "Reason: note" of the Events about an object.
func events(kind, namespace, name string) func() []string {
	return func() []string {
		var list corev1.EventList
		if err := k.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}
}

// recordByNode creates an enactment that records ip from pool, as a
// handler would, for a node that is not there: the controllers leave its
// lifecycle alone.
func recordByNode(t *testing.T, name, pool, ip string) {
	t.Helper()
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(k.Create(ctx, e)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, e) })
	e.Status.IPPool = ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}
	Expect(k.Status().Update(ctx, e)).To(Succeed())
}

// publishState writes a node's NodeNetworkState, stamped at.
func publishState(t *testing.T, pc *envtest.PoolController, node, state string, at time.Time) {
	t.Helper()
	t.Cleanup(func() { _ = k.Delete(ctx, &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	Expect(envtest.PublishState(ctx, k, node, state, at)).To(Succeed())
	// The claim controller reads what nodes carry from its own watch of
	// the states: wait until it shows this one, as a real cluster's claims
	// come long after a node published its state.
	want := slices.AppendSeq([]netip.Addr{}, maps.Keys(netstate.Carriers([]byte(state))))
	slices.SortFunc(want, netip.Addr.Compare)
	Eventually(func() ([]netip.Addr, error) {
		if !pc.Claims.Carried.Synced() {
			return nil, errors.New("the watch of states has not synced")
		}
		carriers, err := pc.Claims.Carried.Of(ctx)
		shown := []netip.Addr{}
		for ip, nodes := range carriers {
			if slices.Contains(nodes, node) {
				shown = append(shown, ip)
			}
		}
		slices.SortFunc(shown, netip.Addr.Compare)
		return shown, err
	}).Should(Equal(want), "the claim controller shows what node %s carries", node)
}
