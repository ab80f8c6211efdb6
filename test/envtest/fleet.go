package envtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// Fleet is a local cluster of real processes driven as an admin drives a
// cluster on day two (upgrades, restores), for the suites that do
// (test/upgrade, test/restore): one pool, one policy whose capture draws
// from it on every node.
type Fleet struct {
	T *testing.T
	// Dir is the cluster's directory; Bin holds this version's
	// localcluster and kubectl-nodeippool.
	Dir, Bin string
	// Pool and Policy are the names of the pool and the policy.
	Pool, Policy string
	// K is a client of the cluster, set by Up.
	K client.Client
}

// Up starts the cluster (localcluster up with args), stops it when the
// test ends, and prints its logs' tails if the test failed.
func (f *Fleet) Up(args ...string) {
	f.T.Helper()
	f.Localcluster(append([]string{"up"}, args...)...)
	f.T.Cleanup(func() {
		if f.T.Failed() {
			PrintLogTails(os.Stderr, f.Dir, 40, func(string) bool { return false })
		}
		f.Localcluster("down")
	})
	var err error
	if f.K, err = LocalClusterClient(f.Dir); err != nil {
		f.T.Fatal(err)
	}
}

// Localcluster runs localcluster with args on the cluster.
func (f *Fleet) Localcluster(args ...string) {
	f.T.Helper()
	out, err := exec.Command(filepath.Join(f.Bin, "localcluster"), append(args, "--dir", f.Dir)...).CombinedOutput()
	if err != nil {
		f.T.Fatalf("localcluster %v: %v\n%s", args, err, out)
	}
	f.T.Logf("localcluster %v:\n%s", args, out)
}

// Create creates the object of a YAML document.
func (f *Fleet) Create(ctx context.Context, doc string) {
	f.T.Helper()
	var o unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
		f.T.Fatal(err)
	}
	if err := f.K.Create(ctx, &o); err != nil {
		f.T.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// Served waits until every node's enactment of the policy is Available
// with one address of the pool and the pool agrees with its holders'
// records (Check); it fails on an address held twice, and returns each
// node's address.
func (f *Fleet) Served(ctx context.Context, when string, nodes []string) map[string]string {
	f.T.Helper()
	var got map[string]string
	f.Eventually(when, func() error {
		got = map[string]string{}
		for _, node := range nodes {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			if err := f.K.Get(ctx, client.ObjectKey{Name: node + "." + f.Policy}, &e); err != nil {
				return err
			}
			if c := e.Status.Conditions.Find("Available"); c == nil || c.Status != corev1.ConditionTrue {
				return fmt.Errorf("enactment %s is not Available: %+v", e.Name, e.Status.Conditions)
			}
			held := e.Status.IPPool[f.Pool].Held()
			if len(held) != 1 {
				return fmt.Errorf("enactment %s holds %v of %s, want one address", e.Name, held, f.Pool)
			}
			got[node] = held[0]
		}
		return f.Check(ctx)
	})
	f.onceEach(when, got)
	return got
}

// onceEach fails the test when two nodes of got have the same address.
func (f *Fleet) onceEach(when string, got map[string]string) {
	f.T.Helper()
	seen := map[string]string{}
	for node, ip := range got {
		if other, ok := seen[ip]; ok {
			f.T.Fatalf("%s: %s is held by %s and %s", when, ip, other, node)
		}
		seen[ip] = node
	}
}

// ServedPooled waits until the pooled policy name is Available for
// nodes, each recorded in its status with one address of the pool that
// its network carries on iface, alone, and the pool agrees with its
// holders' records (Check); it fails on an address recorded twice, and
// returns each node's address.
func (f *Fleet) ServedPooled(ctx context.Context, when, name, iface string, nodes []string) map[string]string {
	f.T.Helper()
	var got map[string]string
	f.Eventually(when, func() error {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := f.K.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return err
		}
		if c := p.Status.Conditions.Find("Available"); c == nil || c.Status != corev1.ConditionTrue || p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("pooled policy %s is not Available at generation %d: %+v", name, p.Generation, p.Status.Conditions)
		}
		got = map[string]string{}
		for _, n := range p.Status.Nodes {
			if len(n.Addresses) != 1 || n.Addresses[0].Pool != f.Pool || n.Releasing || len(n.Released) > 0 {
				return fmt.Errorf("pooled policy %s records %+v for %s, want one address of %s", name, n, n.Node, f.Pool)
			}
			got[n.Node] = n.Addresses[0].IP
		}
		carried := f.Carried(nodes, iface)
		for _, node := range nodes {
			ip, ok := got[node]
			if !ok {
				return fmt.Errorf("pooled policy %s records no address for %s: %+v", name, node, p.Status.Nodes)
			}
			if err := f.generated(ctx, &p, node, ip); err != nil {
				return err
			}
			if len(carried[node]) != 1 || !strings.HasPrefix(carried[node][0], ip+"/") {
				return fmt.Errorf("%s carries %v on %s, and pooled policy %s records %s", node, carried[node], iface, name, ip)
			}
		}
		return f.Check(ctx)
	})
	f.onceEach(when, got)
	return got
}

// generated fails unless the policy the pooled policy p generated for
// node exists, is controlled by p (by its UID: written again after a
// restore), and puts ip in its desired state.
func (f *Fleet) generated(ctx context.Context, p *ippoolv1.PooledNodeNetworkConfigurationPolicy, node, ip string) error {
	var g nmstatev1.NodeNetworkConfigurationPolicy
	if err := f.K.Get(ctx, client.ObjectKey{Name: ippoolv1.NodePolicyName(p.Name, node)}, &g); err != nil {
		return fmt.Errorf("the policy of pooled policy %s for %s: %w", p.Name, node, err)
	}
	if c := metav1.GetControllerOf(&g); c == nil || c.UID != p.UID {
		return fmt.Errorf("policy %s is not controlled by pooled policy %s (UID %s): %+v", g.Name, p.Name, p.UID, c)
	}
	if !strings.Contains(string(g.Spec.DesiredState.Raw), ip) {
		return fmt.Errorf("policy %s does not put %s on %s: %s", g.Name, ip, node, g.Spec.DesiredState.Raw)
	}
	return nil
}

// Kept waits until the pool keeps ip for the return of the node that
// held it.
func (f *Fleet) Kept(ctx context.Context, when, ip string) {
	f.T.Helper()
	f.Eventually(when, func() error {
		var p ippoolv1.NodeIPPool
		if err := f.K.Get(ctx, client.ObjectKey{Name: f.Pool}, &p); err != nil {
			return err
		}
		if !slices.ContainsFunc(p.Status.KeptForReturn, func(k ippoolv1.KeptAddress) bool { return k.IP == ip }) {
			return fmt.Errorf("%s is not kept for its node's return: %+v", ip, p.Status.KeptForReturn)
		}
		return nil
	})
}

// Unchanged waits until nodes are served again and fails unless each
// kept its address and, when applies is given, no node's network took
// another apply.
func (f *Fleet) Unchanged(ctx context.Context, when string, addresses map[string]string, nodes []string, applies map[string]int) {
	f.T.Helper()
	got := f.Served(ctx, when, nodes)
	for _, node := range nodes {
		if got[node] != addresses[node] {
			f.T.Errorf("%s: %s holds %s, held %s before: renumbered", when, node, got[node], addresses[node])
		}
	}
	if applies == nil {
		return
	}
	// A handler that applied again would do it soon after it started;
	// give the new processes a while to show it. (This can only miss an
	// apply, never invent one.)
	time.Sleep(5 * time.Second)
	for node, n := range f.Applies(nodes) {
		if n != applies[node] {
			f.T.Errorf("%s: %s's network took %d applies, %d before: the policy was applied again", when, node, n, applies[node])
		}
	}
}

// Applies counts, by node, the applies each node's network took.
func (f *Fleet) Applies(nodes []string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n] = Applies(f.Dir, n)
	}
	return out
}

// Carried returns, by node, the static addresses each node's network
// carries on iface, whoever applied them (none, before anything was
// applied); it fails the test when a node's network cannot be read.
func (f *Fleet) Carried(nodes []string, iface string) map[string][]string {
	f.T.Helper()
	out := map[string][]string{}
	for _, n := range nodes {
		raw, err := os.ReadFile(filepath.Join(f.Dir, "nodes", n+".yaml"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // nothing applied yet
		}
		if err != nil {
			f.T.Fatalf("read the network of %s: %v", n, err)
		}
		out[n] = InterfaceAddresses(raw, iface)
	}
	return out
}

// Check runs kubectl nodeippool check (the pools agree with their
// holders' records) and wants the pool Available.
func (f *Fleet) Check(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(f.Bin, "kubectl-nodeippool"), "check", "--kubeconfig", filepath.Join(f.Dir, "kubeconfig"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl nodeippool check: %w\n%s", err, out)
	}
	var p ippoolv1.NodeIPPool
	if err := f.K.Get(ctx, client.ObjectKey{Name: f.Pool}, &p); err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(p.Status.Conditions, ippoolv1.ConditionAvailable) {
		return fmt.Errorf("pool %s is not Available: %+v", f.Pool, p.Status.Conditions)
	}
	return nil
}

// Eventually retries do every second until it succeeds, and fails the
// test with its last error after three minutes.
func (f *Fleet) Eventually(when string, do func() error) {
	f.T.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := do()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("%s: %v", when, err)
		}
		time.Sleep(time.Second)
	}
}
