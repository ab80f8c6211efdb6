// Package upgrade runs a local cluster of an earlier version of
// nmstate-ippool with live state, upgrades it to this version in the order
// the install docs give (the CRDs, then the pool controller, then the
// handlers) and downgrades it back, stopping halfway each way (one
// handler rolled, the others not), and checks after each step that no
// node and no Cluster API claim is renumbered, no policy is applied again, the pools agree with
// their holders' records, and a joining node is served.
package upgrade

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// from is the version upgraded from (envtest.EarlierVersion).
const from = envtest.EarlierVersion

const pool, policy, pooled, halfway = "upgrade-pool", "upgrade-policy", "upgrade-pooled", "upgrade-halfway"

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

	c := &envtest.Fleet{T: t, Dir: filepath.Join(tmp, "cluster"), Bin: newBin, Pool: pool, Policy: policy}
	// Addresses are kept for a removed node's return for the quarantine
	// period: long enough to upgrade in between.
	c.Up(append([]string{"--nodes", "3", "--bin", oldBin, "--crd-dir", oldCRDs, "--assets", envtest.AssetsDir(), "--quarantine-period", "10m"},
		envtest.UpArgsWithClusterAPI(t)...)...)
	ctx := t.Context()
	c.Create(ctx, `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: `+pool+`}
spec:
  range: {cidr: 10.77.0.0/24, start: 10.77.0.10, end: 10.77.0.40, exclude: ["10.77.0.12"]}
`)
	c.Create(ctx, envtest.PooledPolicyYAML(policy, "kubernetes.io/os", "linux", pool))
	nodes := []string{"node01", "node02", "node03"}
	addresses := c.Served(ctx, "under "+from[:12], nodes)
	// A pooled policy gives every node a second address of the pool, on
	// eth2; each keeps it through both steps.
	c.Create(ctx, envtest.PooledYAML(pooled, pool, "eth2"))
	second := c.ServedPooled(ctx, "the pooled policy under "+from[:12], pooled, "eth2", nodes)
	// Cluster API claims drawn from the same pool keep their addresses and
	// their IPAddresses through both steps.
	claims := []string{"m1", "m2"}
	for _, name := range claims {
		c.CreateClaim(ctx, machines, name)
	}
	claimed := c.Claimed(ctx, "claims under "+from[:12], machines, claims)
	records := addressUIDs(t, c, claims)

	// A node removed under the earlier version leaves its address kept
	// for its return, in an entry that version wrote; it comes back after
	// the upgrade and gets it back.
	c.Localcluster("node", "remove", "node03")
	c.Kept(ctx, "node03 removed under "+from[:12], addresses["node03"])
	nodes = []string{"node01", "node02"}
	applies := c.Applies(nodes)

	// Halfway: the CRDs, the pool controller and node01's handler are this
	// version's, node02's handler still the earlier one's, as a
	// DaemonSet's rolling update leaves a cluster for a while. Nothing
	// changes, and a policy created now is served on both: node02's
	// earlier handler asks this version's pool controller.
	c.Localcluster("upgrade", "--bin", newBin, "--handlers", "1")
	c.Unchanged(ctx, "halfway through the upgrade", addresses, nodes, applies)
	pooledUnchanged(t, c, "halfway through the upgrade", second, nodes)
	claimsUnchanged(t, c, "halfway through the upgrade", claimed, records)
	mid := *c
	mid.Policy = halfway
	c.Create(ctx, strings.Replace(envtest.PooledPolicyYAML(halfway, "kubernetes.io/os", "linux", pool), "name: eth1", "name: eth3", 1))
	third := mid.Served(ctx, "a policy created halfway through the upgrade", nodes)
	applies = c.Applies(nodes)

	c.Localcluster("upgrade", "--bin", newBin)
	c.Unchanged(ctx, "after the upgrade", addresses, nodes, applies)
	mid.Unchanged(ctx, "after the upgrade", third, nodes, nil)
	pooledUnchanged(t, c, "after the upgrade", second, nodes)
	claimsUnchanged(t, c, "after the upgrade", claimed, records)
	c.CreateClaim(ctx, machines, "m3")
	claims = append(claims, "m3")
	claimed = c.Claimed(ctx, "a claim made after the upgrade", machines, claims)
	records = addressUIDs(t, c, claims)
	c.Localcluster("node", "add", "node03")
	c.Localcluster("node", "add", "node04")
	nodes = append(nodes, "node03", "node04")
	got := c.Served(ctx, "nodes that join after the upgrade", nodes)
	if got["node03"] != addresses["node03"] {
		t.Errorf("node03, back after the upgrade, holds %s; it held %s, kept for its return under %s", got["node03"], addresses["node03"], from[:12])
	}
	addresses = got
	second = c.ServedPooled(ctx, "the pooled policy on nodes that join after the upgrade", pooled, "eth2", nodes)

	// The same the other way: a node removed under this version comes
	// back after the downgrade.
	c.Localcluster("node", "remove", "node04")
	c.Kept(ctx, "node04 removed after the upgrade", addresses["node04"])
	nodes = []string{"node01", "node02", "node03"}
	third = mid.Served(ctx, "the policy created halfway, on the nodes that joined after the upgrade", nodes)
	applies = c.Applies(nodes)

	// Halfway back: the pool controller and node01's handler are the
	// earlier version's, node02's and node03's still this version's.
	// Nothing changes; the policy created halfway up is deleted, and this
	// version's handlers take its addresses off, confirmed to the
	// earlier pool controller, which frees them.
	c.Localcluster("upgrade", "--bin", oldBin, "--crd-dir", oldCRDs, "--handlers", "1")
	c.Unchanged(ctx, "halfway through the downgrade", addresses, nodes, applies)
	pooledUnchanged(t, c, "halfway through the downgrade", second, nodes)
	claimsUnchanged(t, c, "halfway through the downgrade", claimed, records)
	if err := c.K.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: halfway}}); err != nil {
		t.Fatal(err)
	}
	released(t, c, "the policy created halfway up, deleted halfway down", "eth3", third, nodes)
	applies = c.Applies(nodes)

	c.Localcluster("upgrade", "--bin", oldBin, "--crd-dir", oldCRDs)
	c.Unchanged(ctx, "after the downgrade", addresses, nodes, applies)
	pooledUnchanged(t, c, "after the downgrade", second, nodes)
	claimsUnchanged(t, c, "after the downgrade", claimed, records)
	c.Localcluster("node", "add", "node04")
	c.Localcluster("node", "add", "node05")
	nodes = append(nodes, "node04", "node05")
	got = c.Served(ctx, "nodes that join after the downgrade", nodes)
	if got["node04"] != addresses["node04"] {
		t.Errorf("node04, back after the downgrade, holds %s; it held %s, kept for its return", got["node04"], addresses["node04"])
	}
	second = c.ServedPooled(ctx, "the pooled policy on nodes that join after the downgrade", pooled, "eth2", nodes)
	c.CreateClaim(ctx, machines, "m4")
	claimed = c.Claimed(ctx, "a claim made after the downgrade", machines, append(claims, "m4"))
	holders := map[string]string{}
	for _, held := range []struct {
		what string
		by   map[string]string
	}{{"the policy of node", got}, {"the pooled policy of node", second}, {"claim", claimed}} {
		for who, ip := range held.by {
			if other, ok := holders[ip]; ok {
				t.Errorf("%s is held by %s %s and %s", ip, held.what, who, other)
			}
			holders[ip] = held.what + " " + who
		}
	}
}

// pooledUnchanged waits until the pooled policy serves nodes again and
// fails unless each kept the address it had.
func pooledUnchanged(t *testing.T, c *envtest.Fleet, when string, before map[string]string, nodes []string) {
	t.Helper()
	got := c.ServedPooled(t.Context(), when, pooled, "eth2", nodes)
	for _, node := range nodes {
		if got[node] != before[node] {
			t.Errorf("%s: the pooled policy gives %s %s, %s before: renumbered", when, node, got[node], before[node])
		}
	}
}

const machines = "machines"

// released waits until no node of nodes carries an address on iface and
// the pool holds none of ips (each node's address of a deleted policy)
// and agrees with its holders' records.
func released(t *testing.T, c *envtest.Fleet, when, iface string, ips map[string]string, nodes []string) {
	t.Helper()
	c.Eventually(when, func() error {
		for node, carried := range c.Carried(nodes, iface) {
			if len(carried) > 0 {
				return fmt.Errorf("%s still carries %v on %s", node, carried, iface)
			}
		}
		var p ippoolv1.NodeIPPool
		if err := c.K.Get(t.Context(), client.ObjectKey{Name: pool}, &p); err != nil {
			return err
		}
		alloc, err := poolstatus.Allocator(&p)
		if err != nil {
			return err
		}
		for node, ip := range ips {
			if alloc.HasIP(netip.MustParseAddr(ip)) {
				return fmt.Errorf("the pool still holds %s, %s's address of the deleted policy", ip, node)
			}
		}
		return c.Check(t.Context())
	})
}

// addressUIDs returns the UID of each claim's IPAddress: one made again
// would have another.
func addressUIDs(t *testing.T, c *envtest.Fleet, claims []string) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, name := range claims {
		u := capi.NewAddress(envtest.ClaimVersion)
		if err := c.K.Get(t.Context(), client.ObjectKey{Namespace: machines, Name: name}, u); err != nil {
			t.Fatalf("IPAddress %s/%s: %v", machines, name, err)
		}
		out[name] = u.GetUID()
	}
	return out
}

// claimsUnchanged waits until the claims are served again and fails
// unless each kept its address and its IPAddress.
func claimsUnchanged(t *testing.T, c *envtest.Fleet, when string, claimed map[string]string, records map[string]types.UID) {
	t.Helper()
	names := slices.Sorted(maps.Keys(claimed))
	got := c.Claimed(t.Context(), when, machines, names)
	uids := addressUIDs(t, c, names)
	for _, name := range names {
		if got[name] != claimed[name] {
			t.Errorf("%s: claim %s holds %s, held %s before: renumbered", when, name, got[name], claimed[name])
		}
		if uids[name] != records[name] {
			t.Errorf("%s: claim %s's IPAddress was made again", when, name)
		}
	}
}

// buildAt checks out commit into tree (a detached worktree of this
// repository) and builds its handler and pool controller into bin.
func buildAt(t *testing.T, commit, tree, bin string) {
	t.Helper()
	remove, err := envtest.BuildAt(commit, tree, bin, false, "handler", "pool-controller")
	t.Cleanup(remove)
	if err != nil {
		t.Fatal(err)
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
