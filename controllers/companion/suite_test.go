package companion_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// grace is the garbage collection grace period and the quarantine period
// of the controllers these tests start.
const grace = 3 * time.Second

var (
	env    *envtest.Env
	k      client.Client
	simBin string
	ctx    = context.Background()
)

// TestMain runs the package on a control plane with the project's CRDs and
// the NodeIPPool webhook.
func TestMain(m *testing.M) {
	os.Exit(envtest.RunWith(m, []envtest.Option{envtest.WithWebhook()}, func(s *envtest.Suite) {
		env, k, simBin = s.Env, s.Client, s.Command("nmstatectl-sim")
		if _, err := env.StartWebhook(); err != nil {
			panic(err) // the suite cannot run without it
		}
	}, "nmstatectl-sim"))
}

func init() {
	SetDefaultEventuallyTimeout(45 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}

// begin starts a test: a pool controller (with the pooled-policy
// controller) and kubernetes-nmstate's handler as a test double on nodes
// (envtest.Upstream), each a Node labelled role=<label>.
func begin(t *testing.T, label string, nodes ...string) *envtest.Upstream {
	t.Helper()
	return beginWith(t, asIs, label, nodes...)
}

// beginWith is begin with the pool controller adjusted before it starts.
func beginWith(t *testing.T, tune func(*envtest.PoolController), label string, nodes ...string) *envtest.Upstream {
	t.Helper()
	RegisterTestingT(t)
	pc, err := env.StartPoolController(grace, nil, envtest.CompanionMode, tune)
	Expect(err).NotTo(HaveOccurred())
	Expect(pc.PooledPolicies).NotTo(BeNil())
	t.Cleanup(func() {
		_ = pc.Stop()
		// Beside kubernetes-nmstate's handler, whose every process
		// writes every policy's status, the pool controller keeps the
		// policies as metadata only: a read or watch of them whole would
		// decode each of those writes.
		for _, whole := range []any{&nmstatev1.NodeNetworkConfigurationPolicy{}, &nmstatev1.NodeNetworkConfigurationPolicyList{}} {
			if pc.CachedWhole(whole) {
				t.Errorf("the pool controller's cache was asked for whole %T: companion mode keeps the policies as metadata only", whole)
			}
		}
	})
	u := envtest.NewUpstream(t, k, simBin)
	for _, n := range nodes {
		Expect(u.AddNode(n, map[string]string{"role": label})).To(Succeed())
	}
	u.Run()
	return u
}

// removeNode deletes a Node for good, without the finalizer the
// controller may have left on it (a test's controller may stop first).
func removeNode(name string) { _ = envtest.RemoveNode(ctx, k, name) }

// rolledOut starts a test with a pool "cmp-<label>" over cidr from start to
// end and the pooled policy <label> (maxUnavailable 100%) drawing from it
// for nodes, Available on every one of them.
func rolledOut(t *testing.T, tune func(*envtest.PoolController), label, cidr, start, end string, nodes ...string) *envtest.Upstream {
	t.Helper()
	u := beginWith(t, tune, label, nodes...)
	createPool(t, "cmp-"+label, rangeSpec(cidr, start, end))
	create(t, pooled(label, label, "cmp-"+label, "100%"))
	Eventually(status(label)).Should(HavePrefix("Available"))
	return u
}

// asIs leaves the pool controller of a test as it is.
func asIs(*envtest.PoolController) {}

// createPool creates an available pool and deletes it when the test ends.
func createPool(t *testing.T, name string, spec ippoolv1.NodeIPPoolSpec) {
	t.Helper()
	envtest.CreateAvailablePool(t, k, name, spec, grace, 45*time.Second)
}

// pooled returns a pooled policy: for the nodes labelled role=label, its
// capture addr drawn from pool onto eth1.
func pooled(name, label, pool string, maxUnavailable string) *ippoolv1.PooledNodeNetworkConfigurationPolicy {
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"role": label}
	p.Spec.Capture = map[string]string{"addr": "ippool." + pool + ".allocate"}
	p.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	if maxUnavailable != "" {
		v := intOrString(maxUnavailable)
		p.Spec.MaxUnavailable = &v
	}
	return p
}

// create creates a pooled policy and deletes it when the test ends (with
// its finalizer, if no controller lets it go).
func create(t *testing.T, p *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
	t.Helper()
	Expect(k.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() {
		_ = k.Delete(ctx, p)
		Eventually(func() bool {
			var got ippoolv1.PooledNodeNetworkConfigurationPolicy
			if err := k.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
				return true
			}
			if got.DeletionTimestamp != nil && time.Since(got.DeletionTimestamp.Time) > 20*time.Second {
				got.SetFinalizers(nil)
				_ = k.Update(ctx, &got)
			}
			return false
		}, time.Minute).Should(BeTrue())
	})
}

// status returns "Type Reason: message" of the pooled policy's True
// condition.
func status(name string) func() string {
	return func() string {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return fmt.Sprintf("%s %s: %s", c.Type, c.Reason, c.Message)
			}
		}
		return "no True condition"
	}
}

// recorded returns "node ip" of every address the pooled policy records.
func recorded(name string) func() []string {
	return func() []string {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, n := range p.Status.Nodes {
			for _, a := range n.Addresses {
				out = append(out, n.Node+" "+a.IP)
			}
		}
		return out
	}
}

// generated returns the names of the NNCPs the pooled policy generated.
func generated(name string) func() []string {
	return func() []string {
		var list nmstatev1.NodeNetworkConfigurationPolicyList
		if err := k.List(ctx, &list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: name}); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, g := range list.Items {
			out = append(out, g.Name)
		}
		slices.Sort(out)
		return out
	}
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

// events returns "Reason: note" of the Events about a pooled policy.
func events(name string) func() []string {
	return func() []string {
		out, err := envtest.Events(ctx, k, "PooledNodeNetworkConfigurationPolicy", name)
		if err != nil {
			return []string{err.Error()}
		}
		return out
	}
}

// describe says, for a failure message, where a pooled policy's nodes
// stand: its status, and each generated policy with its enactment.
func describe(name string) func() string {
	return func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s; records %v;", status(name)(), recorded(name)())
		var list nmstatev1.NodeNetworkConfigurationPolicyList
		_ = k.List(ctx, &list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: name})
		for _, g := range list.Items {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			err := k.Get(ctx, shared.EnactmentKey(g.Annotations[ippoolv1.PooledNodeAnnotation], g.Name), &e)
			fmt.Fprintf(&b, " %s gen %d created %s: enactment gen %d %s created %s (%v);", g.Name, g.Generation, g.CreationTimestamp.Format(time.RFC3339),
				e.Status.PolicyGeneration, conditions.TrueType(e.Status.Conditions), e.CreationTimestamp.Format(time.RFC3339), err)
		}
		return b.String()
	}
}
