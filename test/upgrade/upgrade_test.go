// Package upgrade runs a local cluster of an earlier version of
// nmstate-ippool with live state, upgrades it to this version in the order
// the install docs give (the CRDs, then the pool controller, then the
// handlers) and downgrades it back, and checks after each step that no
// node is renumbered, no policy is applied again, the pools agree with
// their holders' records, and a joining node is served.
package upgrade

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
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

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// from is the version upgraded from: the last commit before a pool's
// entries named their holder in holder (they named the enactment only),
// so that the upgrade carries state an earlier version wrote in an earlier
// shape. Move it forward when an API change needs its own test; an API
// change that has no additive path or conversion fails here.
const from = "d04e52ece210a0f63c0575e9094193aed6a87eb4"

const pool, policy = "upgrade-pool", "upgrade-policy"

func TestUpgradeAndDowngrade(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two versions of the local cluster")
	}
	tmp := t.TempDir()
	oldTree, oldBin, newBin := filepath.Join(tmp, "old"), filepath.Join(tmp, "old-bin"), filepath.Join(tmp, "new-bin")
	if err := envtest.BuildCommands(newBin, "handler", "pool-controller", "nmstatectl-sim", "localcluster", "kubectl-nodeippool"); err != nil {
		t.Fatal(err)
	}
	buildAt(t, from, oldTree, oldBin)
	// The nodes' nmstatectl is the node's, not the project's: the same
	// simulator on both sides, counting applies.
	copyFile(t, filepath.Join(newBin, "nmstatectl-sim"), filepath.Join(oldBin, "nmstatectl-sim"))
	oldCRDs := filepath.Join(oldTree, "deploy", "crd")

	c := &cluster{t: t, dir: filepath.Join(tmp, "cluster"), bin: newBin}
	// Addresses are kept for a removed node's return for the quarantine
	// period: long enough to upgrade in between.
	c.localcluster("up", "--nodes", "3", "--bin", oldBin, "--crd-dir", oldCRDs, "--assets", envtest.AssetsDir(),
		"--quarantine-period", "10m")
	t.Cleanup(func() {
		if t.Failed() {
			envtest.PrintLogTails(os.Stderr, c.dir, 40, func(string) bool { return false })
		}
		c.localcluster("down")
	})
	var err error
	if c.k, err = envtest.LocalClusterClient(c.dir); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c.create(ctx, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: `+pool+`}
spec:
  range: {cidr: 10.77.0.0/24, start: 10.77.0.10, end: 10.77.0.40, exclude: ["10.77.0.12"]}
`)
	c.create(ctx, envtest.PooledPolicyYAML(policy, "kubernetes.io/os", "linux", pool))
	nodes := []string{"node01", "node02", "node03"}
	addresses := c.served(ctx, "under "+from[:12], nodes)

	// A node removed under the earlier version leaves its address kept
	// for its return, in an entry that version wrote; it comes back after
	// the upgrade and gets it back.
	c.localcluster("node", "remove", "node03")
	c.kept(ctx, "node03 removed under "+from[:12], addresses["node03"])
	nodes = []string{"node01", "node02"}
	applies := c.applies(nodes)

	c.localcluster("upgrade", "--bin", newBin)
	c.unchanged(ctx, "after the upgrade", addresses, nodes, applies)
	c.localcluster("node", "add", "node03")
	c.localcluster("node", "add", "node04")
	nodes = append(nodes, "node03", "node04")
	got := c.served(ctx, "nodes that join after the upgrade", nodes)
	if got["node03"] != addresses["node03"] {
		c.t.Errorf("node03, back after the upgrade, holds %s; it held %s, kept for its return under %s", got["node03"], addresses["node03"], from[:12])
	}
	addresses = got

	// The same the other way: a node removed under this version comes
	// back after the downgrade.
	c.localcluster("node", "remove", "node04")
	c.kept(ctx, "node04 removed after the upgrade", addresses["node04"])
	nodes = []string{"node01", "node02", "node03"}
	applies = c.applies(nodes)

	c.localcluster("upgrade", "--bin", oldBin, "--crd-dir", oldCRDs)
	c.unchanged(ctx, "after the downgrade", addresses, nodes, applies)
	c.localcluster("node", "add", "node04")
	c.localcluster("node", "add", "node05")
	nodes = append(nodes, "node04", "node05")
	got = c.served(ctx, "nodes that join after the downgrade", nodes)
	if got["node04"] != addresses["node04"] {
		c.t.Errorf("node04, back after the downgrade, holds %s; it held %s, kept for its return", got["node04"], addresses["node04"])
	}
}

// cluster is the local cluster of the test.
type cluster struct {
	t   *testing.T
	dir string
	bin string
	k   client.Client
}

func (c *cluster) localcluster(args ...string) {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, "localcluster"), append(args, "--dir", c.dir)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("localcluster %v: %v\n%s", args, err, out)
	}
	c.t.Logf("localcluster %v:\n%s", args, out)
}

func (c *cluster) create(ctx context.Context, doc string) {
	c.t.Helper()
	var o unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
		c.t.Fatal(err)
	}
	if err := c.k.Create(ctx, &o); err != nil {
		c.t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// served waits until every node's enactment of the policy is Available
// with an address of the pool, and the pool agrees with the records; it
// fails on an address held twice, and returns each node's address.
func (c *cluster) served(ctx context.Context, when string, nodes []string) map[string]string {
	c.t.Helper()
	var got map[string]string
	c.eventually(when, func() error {
		got = map[string]string{}
		for _, node := range nodes {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			if err := c.k.Get(ctx, client.ObjectKey{Name: node + "." + policy}, &e); err != nil {
				return err
			}
			if !available(e) {
				return fmt.Errorf("enactment %s is not Available: %+v", e.Name, e.Status.Conditions)
			}
			held := e.Status.IPPool[pool].Held()
			if len(held) != 1 {
				return fmt.Errorf("enactment %s holds %v of %s, want one address", e.Name, held, pool)
			}
			got[node] = held[0]
		}
		return c.check()
	})
	seen := map[string]string{}
	for node, ip := range got {
		if other, ok := seen[ip]; ok {
			c.t.Fatalf("%s: %s is held by %s and %s", when, ip, other, node)
		}
		seen[ip] = node
		if a := netip.MustParseAddr(ip); a.Compare(netip.MustParseAddr("10.77.0.10")) < 0 || a.Compare(netip.MustParseAddr("10.77.0.40")) > 0 || ip == "10.77.0.12" {
			c.t.Errorf("%s: %s holds %s, outside the pool's range or excluded", when, node, ip)
		}
	}
	return got
}

// available reports whether an enactment's Available condition is True.
func available(e nncev1beta1.NodeNetworkConfigurationEnactment) bool {
	for _, c := range e.Status.Conditions {
		if c.Type == "Available" && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// kept waits until the pool keeps ip for the return of the node that
// held it.
func (c *cluster) kept(ctx context.Context, when, ip string) {
	c.t.Helper()
	c.eventually(when, func() error {
		var p ippoolv1.NodeIPPool
		if err := c.k.Get(ctx, client.ObjectKey{Name: pool}, &p); err != nil {
			return err
		}
		if !slices.ContainsFunc(p.Status.KeptForReturn, func(k ippoolv1.KeptAddress) bool { return k.IP == ip }) {
			return fmt.Errorf("%s is not kept for its node's return: %+v", ip, p.Status.KeptForReturn)
		}
		return nil
	})
}

// unchanged waits until nodes are served again and fails unless each
// kept its address and no node's network took another apply.
func (c *cluster) unchanged(ctx context.Context, when string, addresses map[string]string, nodes []string, applies map[string]int) {
	c.t.Helper()
	got := c.served(ctx, when, nodes)
	for _, node := range nodes {
		if got[node] != addresses[node] {
			c.t.Errorf("%s: %s holds %s, held %s before: renumbered", when, node, got[node], addresses[node])
		}
	}
	// A handler that applied again would do it soon after it started; give
	// the new processes a while to show it.
	time.Sleep(5 * time.Second)
	for node, n := range c.applies(nodes) {
		if n != applies[node] {
			c.t.Errorf("%s: %s's network took %d applies, %d before: the policy was applied again", when, node, n, applies[node])
		}
	}
}

func (c *cluster) applies(nodes []string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n] = envtest.Applies(c.dir, n)
	}
	return out
}

// check runs kubectl nodeippool check: the pools agree with their
// holders' records.
func (c *cluster) check() error {
	cmd := exec.Command(filepath.Join(c.bin, "kubectl-nodeippool"), "check", "--kubeconfig", filepath.Join(c.dir, "kubeconfig"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl nodeippool check: %w\n%s", err, out)
	}
	var p ippoolv1.NodeIPPool
	if err := c.k.Get(context.Background(), client.ObjectKey{Name: pool}, &p); err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(p.Status.Conditions, ippoolv1.ConditionAvailable) {
		return fmt.Errorf("pool %s is not Available: %+v", pool, p.Status.Conditions)
	}
	return nil
}

func (c *cluster) eventually(when string, f func() error) {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %v", when, err)
		}
		time.Sleep(time.Second)
	}
}

// buildAt checks out commit into tree (a detached worktree of this
// repository) and builds its handler and pool controller into bin.
func buildAt(t *testing.T, commit, tree, bin string) {
	t.Helper()
	root := envtest.RepoRoot()
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Fatalf("commit %s, the version upgraded from, is not in this clone (a shallow clone? git fetch --unshallow): %v", commit, err)
	}
	run(t, root, "git", "worktree", "add", "--detach", tree, commit)
	t.Cleanup(func() { _, _ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).CombinedOutput() })
	run(t, tree, "go", "build", "-o", bin+"/", "./cmd/handler", "./cmd/pool-controller")
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o755); err != nil {
		t.Fatal(err)
	}
}
