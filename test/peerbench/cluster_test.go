package peerbench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// baselineBuild is where the programs and CRDs of -peer.baseline are.
type baselineBuild struct{ bin, crds string }

// buildBaseline builds the handler and pool controller of -peer.baseline
// in a worktree of this repository, beside this version's simulated
// nmstatectl (the node's, not the project's: the same on both sides).
func buildBaseline(b *testing.B, bin string) *baselineBuild {
	if *baseline == "" {
		b.Fatalf("-peer.handlers names %s or %s: say which commit with -peer.baseline", baselineCluster, companionBaselineCluster)
	}
	tmp := b.TempDir()
	base := &baselineBuild{bin: filepath.Join(tmp, "bin"), crds: filepath.Join(tmp, "tree", "deploy", "crd")}
	remove, err := envtest.BuildAt(*baseline, filepath.Join(tmp, "tree"), base.bin, false, "handler", "pool-controller")
	b.Cleanup(remove)
	must(b, err)
	sim, err := os.ReadFile(filepath.Join(bin, "nmstatectl-sim"))
	must(b, err)
	must(b, os.WriteFile(filepath.Join(base.bin, "nmstatectl-sim"), sim, 0o755))
	return base
}

// measure starts a local cluster of n nodes of a kind and rolls out every
// case that runs on it.
func measure(b *testing.B, bin, peer string, n int, kind string, base *baselineBuild) map[string]figures {
	dir := filepath.Join(b.TempDir(), "cluster")
	args := []string{"up", "--nodes", strconv.Itoa(n), "--peer-handler", peer, "--assets", envtest.AssetsDir()}
	switch kind {
	case companionCluster:
		args = append(args, "--bin", bin, "--handler", upstreamCluster, "--companion")
	case baselineCluster:
		args = append(args, "--bin", base.bin, "--crd-dir", base.crds, "--handler", oursCluster)
	case companionBaselineCluster:
		args = append(args, "--bin", base.bin, "--crd-dir", base.crds, "--handler", upstreamCluster, "--companion")
	default:
		args = append(args, "--bin", bin, "--handler", kind)
	}
	localcluster(b, bin, dir, args...)
	defer localcluster(b, bin, dir, "down")
	cfg, err := envtest.LocalClusterConfig(dir)
	must(b, err)
	// Unthrottled: client-go's default of 5 requests a second would pace
	// the polls and the floor's writes.
	cfg.QPS = -1
	k, err := envtest.ClientFor(cfg)
	must(b, err)
	// The floor of a handler's memory, beside the handlers: a
	// controller-runtime manager that watches Nodes and does nothing.
	floor := exec.Command(filepath.Join(bin, "floor"), "--kubeconfig", filepath.Join(dir, "kubeconfig"))
	floorLog, err := os.Create(filepath.Join(dir, "logs", "floor.log"))
	must(b, err)
	defer func() { _ = floorLog.Close() }()
	floor.Stdout, floor.Stderr = floorLog, floorLog
	must(b, floor.Start())
	defer func() { _ = floor.Process.Kill(); _ = floor.Wait() }()
	m := &meter{b: b, k: k, cfg: cfg, dir: dir, nodes: n, floorPID: strconv.Itoa(floor.Process.Pid)}
	out := map[string]figures{}
	for i, c := range cases {
		if c.runsOn(kind) && chosen(c.name) {
			out[c.name] = m.rollouts(c, i)
		}
	}
	return out
}

// chosen reports whether -peer.cases names the case (or names none).
func chosen(name string) bool {
	if *onlyCases == "" {
		return true
	}
	for c := range strings.SplitSeq(*onlyCases, ",") {
		if strings.TrimSpace(c) == name {
			return true
		}
	}
	return false
}

// localcluster runs the localcluster command with args on the cluster in dir.
func localcluster(b *testing.B, bin, dir string, args ...string) {
	cmd := exec.Command(filepath.Join(bin, "localcluster"), append(args, "--dir", dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("localcluster %v: %v\n%s", args, err, out)
	}
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
