// Package restore restores a local cluster of real processes the ways
// admins do while its nodes keep running, and checks that no address is
// ever on two NICs, no node is renumbered, new demand is served around
// what the nodes carry, and the pools converge to what is true.
package restore

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

const pool, policy, pooled = "restore-pool", "restore-policy", "restore-pooled"

// fleet starts a cluster of three nodes running this version (up with
// the extra flags) with a pool and a policy on every node, and returns it
// once every node is served.
func fleet(t *testing.T, extra ...string) (*envtest.Fleet, map[string]string) {
	t.Helper()
	f := withPool(t, extra...)
	f.Create(t.Context(), envtest.PooledPolicyYAML(policy, "kubernetes.io/os", "linux", pool))
	return f, f.Served(t.Context(), "before the backup", []string{"node01", "node02", "node03"})
}

// withPool starts a cluster of three nodes running this version (up with
// the extra flags), with a pool.
func withPool(t *testing.T, extra ...string) *envtest.Fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a local cluster")
	}
	bin := commands(t)
	f := &envtest.Fleet{T: t, Dir: filepath.Join(t.TempDir(), "cluster"), Bin: bin, Pool: pool, Policy: policy}
	f.Up(append([]string{"--nodes", "3", "--bin", bin, "--assets", envtest.AssetsDir()}, extra...)...)
	f.Create(t.Context(), `apiVersion: nmstate.io/v1
kind: NodeIPPool
metadata: {name: `+pool+`}
spec:
  range: {cidr: 10.78.0.0/24, start: 10.78.0.10, end: 10.78.0.40}
`)
	return f
}

var (
	built    sync.Once
	bin      string
	buildErr error
)

// TestMain removes the commands the tests built once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if bin != "" {
		_ = os.RemoveAll(bin)
	}
	os.Exit(code)
}

// commands builds this version's commands, once for the package.
func commands(t *testing.T) string {
	t.Helper()
	built.Do(func() {
		dir, err := os.MkdirTemp("", "restore-bin-")
		if err != nil {
			buildErr = err
			return
		}
		bin = dir
		buildErr = envtest.BuildCommands(bin, "handler", "pool-controller", "nmstatectl-sim", "localcluster", "kubectl-nodeippool")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// TestRestoreWithoutStatus: the control plane is rebuilt from nothing
// while the nodes run, and a backup of the pools and policies is restored
// without their status (Velero's default, or a GitOps tool re-creating
// objects from their specs). No node is renumbered: each adopts the
// address it carries. A node that joins gets an address no NIC carries,
// and the pool agrees with its holders' records.
func TestRestoreWithoutStatus(t *testing.T) { restoreKeepsEveryNode(t, nil) }

// TestRestoreWithoutStatusSelfAllocating: as TestRestoreWithoutStatus,
// with handlers that take their addresses from the pools themselves
// (handler --self-allocate) instead of asking the pool controller.
func TestRestoreWithoutStatusSelfAllocating(t *testing.T) {
	f := restoreKeepsEveryNode(t, []string{"--self-allocate"})
	// node04, which joined after the restore, took its address itself.
	log, err := os.ReadFile(filepath.Join(f.Dir, "logs", "handler-node04.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"reason":"SelfAllocated"`) {
		t.Error("node04's handler logs no address it took itself (reason SelfAllocated): did it run with --self-allocate?")
	}
}

// TestRestoreWithStatus: as TestRestoreWithoutStatus, with the pools'
// status restored (Velero's restoreStatus) and no enactment: the bitmap
// comes back with every node's address set and no record naming its
// holder. Each node gets back the address it carries, not a new one.
func TestRestoreWithStatus(t *testing.T) { restoreKeepsEveryNode(t, nil, "--with-status") }

// TestRestoreWithStatusSelfAllocating: as TestRestoreWithStatus, with
// self-allocating handlers. A handler cannot read every holder's records,
// so it cannot tell that the address its node carries, set in the
// restored bitmap, is recorded by nobody: it asks the pool controller,
// which can, and gives it back.
func TestRestoreWithStatusSelfAllocating(t *testing.T) {
	restoreKeepsEveryNode(t, []string{"--self-allocate"}, "--with-status")
}

// restoreKeepsEveryNode backs up and restores (localcluster restore with
// flags) a fleet of three nodes (up with upArgs) served by one pool, and
// checks that no node is renumbered and that a node that joins after is
// served around them.
func restoreKeepsEveryNode(t *testing.T, upArgs []string, flags ...string) *envtest.Fleet {
	f, before := fleet(t, upArgs...)
	ctx := t.Context()
	backUpAndRestore(t, f, flags...)
	nodes := []string{"node01", "node02", "node03"}
	f.Unchanged(ctx, "after the restore", before, nodes, nil)
	f.Localcluster("node", "add", "node04")
	nodes = append(nodes, "node04")
	f.Served(ctx, "a node that joins after the restore", nodes)
	oneNICEach(t, f, nodes)
	return f
}

// TestClaimsRestoredWithoutStatus: Cluster API's IPAddressClaims and their
// IPAddresses, drawn from the pool the nodes' policy draws from, come back
// from a backup: the IPAddresses first, without the owner references that
// name their claims' old UIDs (as Velero restores them), then the claims
// without their status. The key that signed the IPAddresses went with
// etcd. Every claim keeps its address (it adopts its IPAddress), no node
// is renumbered, and a claim and a node made after the restore get
// addresses that no claim holds and no NIC carries.
func TestClaimsRestoredWithoutStatus(t *testing.T) { claimsKeepTheirAddresses(t) }

// TestClaimsRestoredWithStatus: as TestClaimsRestoredWithoutStatus, with
// the claims' and the pools' status restored (Velero's restoreStatus).
func TestClaimsRestoredWithStatus(t *testing.T) { claimsKeepTheirAddresses(t, "--with-status") }

const machines = "machines"

// claimsKeepTheirAddresses backs up and restores (localcluster restore
// with flags) a fleet of three nodes and three claims served by one pool,
// and checks that no claim and no node is renumbered, and that a claim
// and a node that come after are served around them.
func claimsKeepTheirAddresses(t *testing.T, flags ...string) {
	f, nodesBefore := fleet(t, envtest.UpArgsWithClusterAPI(t)...)
	ctx := t.Context()
	claims := []string{"m1", "m2", "m3"}
	for _, c := range claims {
		f.CreateClaim(ctx, machines, c)
	}
	claimsBefore := f.Claimed(ctx, "before the backup", machines, claims)
	backUpAndRestore(t, f, flags...)
	nodes := []string{"node01", "node02", "node03"}
	f.Unchanged(ctx, "after the restore", nodesBefore, nodes, nil)
	got := f.Claimed(ctx, "after the restore", machines, claims)
	for _, c := range claims {
		if got[c] != claimsBefore[c] {
			t.Errorf("claim %s holds %s after the restore, %s before: renumbered", c, got[c], claimsBefore[c])
		}
	}

	f.CreateClaim(ctx, machines, "m4")
	claims = append(claims, "m4")
	f.Localcluster("node", "add", "node04")
	nodes = append(nodes, "node04")
	byNode := f.Served(ctx, "a node that joins after the restore", nodes)
	byClaim := f.Claimed(ctx, "a claim made after the restore", machines, claims)
	holders := map[string]string{}
	for who, ip := range byNode {
		holders[ip] = "node " + who
	}
	for who, ip := range byClaim {
		if other, ok := holders[ip]; ok {
			t.Errorf("%s is held by claim %s and %s", ip, who, other)
		}
		holders[ip] = "claim " + who
	}
	oneNICEach(t, f, nodes)
	for node, addrs := range f.Carried(nodes, "eth1") {
		for _, a := range addrs {
			if h := holders[a]; strings.HasPrefix(h, "claim ") {
				t.Errorf("%s, %s's address, is on the NIC of %s", a, h, node)
			}
		}
	}
}

// TestPooledPolicyRestoredWithoutStatus: a pooled policy comes back from
// a backup without its status (the record of every node's address) and
// without the policies generated from it (its controller writes them
// again); no node is renumbered, and a node that joins gets an address no
// NIC carries.
func TestPooledPolicyRestoredWithoutStatus(t *testing.T) { pooledKeepsEveryNode(t, nil) }

// TestPooledPolicyRestoredWithStatus: as TestPooledPolicyRestoredWithoutStatus,
// with the pooled policy's and the pool's status restored (Velero's
// restoreStatus): the pooled policy's record names every node's address.
func TestPooledPolicyRestoredWithStatus(t *testing.T) { pooledKeepsEveryNode(t, nil, "--with-status") }

// TestCompanionRestoredWithoutStatus: as TestPooledPolicyRestoredWithoutStatus,
// in companion mode: kubernetes-nmstate's handler runs on every node and
// applies the policies generated from the pooled policy, and publishes
// the NodeNetworkStates the addresses are adopted from after the restore.
func TestCompanionRestoredWithoutStatus(t *testing.T) { pooledKeepsEveryNode(t, companion(t)) }

// TestCompanionRestoredWithStatus: as TestCompanionRestoredWithoutStatus,
// with the pooled policy's and the pool's status restored.
func TestCompanionRestoredWithStatus(t *testing.T) {
	pooledKeepsEveryNode(t, companion(t), "--with-status")
}

// companion returns the arguments of up for companion mode beside
// kubernetes-nmstate's handler, or skips the test when this checkout
// cannot build that handler (no peers folder).
func companion(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a local cluster")
	}
	peer, err := envtest.PeerHandler()
	if err != nil {
		t.Fatal(err)
	}
	if peer == "" {
		t.Skip("kubernetes-nmstate's handler cannot be built here: no peers folder")
	}
	return []string{"--handler", "upstream", "--companion", "--peer-handler", peer}
}

// pooledKeepsEveryNode backs up and restores (localcluster restore with
// flags) a pooled policy of three nodes (up with upArgs), and checks that
// no node is renumbered and that a node that joins after is served around
// them.
func pooledKeepsEveryNode(t *testing.T, upArgs []string, flags ...string) {
	f := withPool(t, upArgs...)
	ctx := t.Context()
	f.Create(ctx, envtest.PooledYAML(pooled, pool, "eth1"))
	nodes := []string{"node01", "node02", "node03"}
	before := f.ServedPooled(ctx, "before the backup", pooled, "eth1", nodes)
	backUpAndRestore(t, f, flags...)
	got := f.ServedPooled(ctx, "after the restore", pooled, "eth1", nodes)
	for _, node := range nodes {
		if got[node] != before[node] {
			t.Errorf("%s holds %s after the restore, %s before: renumbered", node, got[node], before[node])
		}
	}
	f.Localcluster("node", "add", "node04")
	nodes = append(nodes, "node04")
	got = f.ServedPooled(ctx, "a node that joins after the restore", pooled, "eth1", nodes)
	for _, node := range nodes[:3] {
		if got[node] != before[node] {
			t.Errorf("%s holds %s once node04 joined, %s before the restore: renumbered", node, got[node], before[node])
		}
	}
	oneNICEach(t, f, nodes)
}

// TestEtcdRestoredFromAnEarlierSnapshot: etcd is restored, while the
// nodes run and their handlers are stopped (docs/operations.md), from a snapshot taken before node04 and node05 joined and
// node04 and node03 left. node05 carries an address the restored pool
// does not record, above node04's, free again, so that only what the
// nodes carry keeps node05 on it; node03 is recorded by the snapshot as
// holding an address its removed machine no longer carries. Every running
// node keeps what it carries, a node that joins gets an address no NIC
// carries, and once the admin deletes node03's Node the pool agrees with
// what is true.
func TestEtcdRestoredFromAnEarlierSnapshot(t *testing.T) {
	f, before := fleet(t)
	ctx := t.Context()
	served := func(when string, nodes []string) map[string]string { return f.Served(ctx, when, nodes) }
	after, running := restoreAnEarlierSnapshot(t, f, served)
	got := f.Served(ctx, "after the restore", running)
	for _, node := range []string{"node01", "node02"} {
		if got[node] != before[node] {
			t.Errorf("%s holds %s after the restore, %s before: renumbered", node, got[node], before[node])
		}
	}
	if got["node05"] != after["node05"] {
		t.Errorf("node05, which joined after the snapshot, holds %s after the restore; it carried %s (free in the restored pool: %s, node04's, was lower)",
			got["node05"], after["node05"], after["node04"])
	}
	if got["node06"] == before["node03"] {
		t.Errorf("node06 got %s, which the restored node03's enactment records", got["node06"])
	}
	oneNICEach(t, f, running)

	// The snapshot's node03 is a Node without a machine; the admin deletes
	// it, saying it is shut down, and the pool frees what it recorded.
	deleteShutDown(t, f, "node03")
	f.Eventually("node03 deleted", func() error {
		err := f.K.Get(ctx, client.ObjectKey{Name: "node03." + policy}, &nncev1beta1.NodeNetworkConfigurationEnactment{})
		if apierrors.IsNotFound(err) {
			return f.Check(ctx)
		}
		if err == nil {
			err = errors.New("node03's enactment is still there")
		}
		return err
	})
	f.Localcluster("node", "add", "node07")
	running = append(running, "node07")
	f.Served(ctx, "a node that joins after node03 is gone", running)
	oneNICEach(t, f, running)
}

// restoreAnEarlierSnapshot takes an etcd snapshot of f's cluster of three
// served nodes, then has node04 and node05 join (served reads what each
// node is served) and node04 and node03 leave, restores the snapshot while
// the nodes run, and has node06 join. It returns what was served once
// node05 joined, with node05 above node04, and the nodes that run, each
// address on one NIC.
func restoreAnEarlierSnapshot(t *testing.T, f *envtest.Fleet,
	served func(when string, nodes []string) map[string]string) (after map[string]string, running []string) {
	t.Helper()
	f.Localcluster("etcd", "snapshot", "before")
	f.Localcluster("node", "add", "node04")
	served("node04 joins after the snapshot", []string{"node01", "node02", "node03", "node04"})
	f.Localcluster("node", "add", "node05")
	after = served("node05 joins after the snapshot", []string{"node01", "node02", "node03", "node04", "node05"})
	if netip.MustParseAddr(after["node05"]).Less(netip.MustParseAddr(after["node04"])) {
		t.Fatalf("node05 got %s, below node04's %s: the test needs node05 above", after["node05"], after["node04"])
	}
	f.Localcluster("node", "remove", "node04")
	f.Localcluster("node", "remove", "node03")

	f.Localcluster("etcd", "restore", "before")
	f.Localcluster("node", "add", "node06")
	running = []string{"node01", "node02", "node05", "node06"}
	oneNICEach(t, f, running)
	return after, running
}

// backUpAndRestore grows the pool's range down, backs the cluster up and
// restores it (localcluster restore with flags). A holder given an
// address afresh after the restore would get one below those taken
// before, so that only keeping what they had keeps them where they are.
func backUpAndRestore(t *testing.T, f *envtest.Fleet, flags ...string) {
	t.Helper()
	growDown(t, f, "10.78.0.2")
	backup := filepath.Join(t.TempDir(), "backup.yaml")
	f.Localcluster("backup", backup)
	f.Localcluster(append(append([]string{"restore"}, flags...), backup)...)
}

// growDown moves the start of the pool's range down to start, and waits
// until the pool serves from it.
func growDown(t *testing.T, f *envtest.Fleet, start string) {
	t.Helper()
	ctx := t.Context()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := f.K.Get(ctx, client.ObjectKey{Name: pool}, &p); err != nil {
			return err
		}
		p.Spec.Range.Start = start
		return f.K.Update(ctx, &p)
	})
	if err != nil {
		t.Fatalf("grow pool %s down to %s: %v", pool, start, err)
	}
	f.Eventually("the pool grown down", func() error {
		var p ippoolv1.NodeIPPool
		if err := f.K.Get(ctx, client.ObjectKey{Name: pool}, &p); err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("pool %s has observed generation %d of %d", pool, p.Status.ObservedGeneration, p.Generation)
		}
		return f.Check(ctx)
	})
}

// oneNICEach fails if an address is carried on two nodes' networks.
func oneNICEach(t *testing.T, f *envtest.Fleet, nodes []string) {
	t.Helper()
	seen := map[string]string{}
	for node, addrs := range f.Carried(nodes, "eth1") {
		for _, a := range addrs {
			if other, ok := seen[a]; ok {
				t.Errorf("%s is on the NICs of %s and %s", a, other, node)
			}
			seen[a] = node
		}
	}
}

// deleteShutDown deletes a Node whose machine is gone as an admin does:
// tainted out of service, then deleted.
func deleteShutDown(t *testing.T, f *envtest.Fleet, name string) {
	t.Helper()
	ctx := t.Context()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := f.K.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService }) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		}
		return f.K.Update(ctx, &n)
	})
	if err != nil {
		t.Fatalf("taint node %s out of service: %v", name, err)
	}
	if err := f.K.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("delete node %s: %v", name, err)
	}
}

// TestCompanionEtcdRestoredFromAnEarlierSnapshot: as
// TestEtcdRestoredFromAnEarlierSnapshot, in companion mode, where a
// pooled policy gives every node its address and kubernetes-nmstate's
// handler applies the policies generated from it. node05 keeps what it
// carries though the restored pooled policy records nothing for it;
// node03, which the restored pooled policy records but whose machine is
// gone, loses its record once the admin deletes its Node, and the pool
// agrees with its holders' records.
func TestCompanionEtcdRestoredFromAnEarlierSnapshot(t *testing.T) {
	f := withPool(t, companion(t)...)
	ctx := t.Context()
	f.Create(ctx, envtest.PooledYAML(pooled, pool, "eth1"))
	before := f.ServedPooled(ctx, "before the snapshot", pooled, "eth1", []string{"node01", "node02", "node03"})
	served := func(when string, nodes []string) map[string]string {
		return f.ServedPooled(ctx, when, pooled, "eth1", nodes)
	}
	after, running := restoreAnEarlierSnapshot(t, f, served)
	got := f.ServedPooled(ctx, "after the restore", pooled, "eth1", running)
	for _, node := range []string{"node01", "node02"} {
		if got[node] != before[node] {
			t.Errorf("%s holds %s after the restore, %s before: renumbered", node, got[node], before[node])
		}
	}
	if got["node05"] != after["node05"] {
		t.Errorf("node05, which joined after the snapshot, holds %s after the restore; it carried %s", got["node05"], after["node05"])
	}
	if got["node06"] == before["node03"] {
		t.Errorf("node06 got %s, which the restored pooled policy records for node03", got["node06"])
	}
	oneNICEach(t, f, running)

	deleteShutDown(t, f, "node03")
	f.Eventually("node03 deleted", func() error {
		var p ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := f.K.Get(ctx, client.ObjectKey{Name: pooled}, &p); err != nil {
			return err
		}
		if slices.ContainsFunc(p.Status.Nodes, func(n ippoolv1.PooledPolicyNode) bool { return n.Node == "node03" }) {
			return errors.New("the pooled policy still records node03")
		}
		return f.Check(ctx)
	})
	f.Localcluster("node", "add", "node07")
	running = append(running, "node07")
	f.ServedPooled(ctx, "a node that joins after node03 is gone", pooled, "eth1", running)
	oneNICEach(t, f, running)
}
