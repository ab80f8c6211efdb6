// Package peerbench measures our handler against kubernetes-nmstate's,
// built unmodified from ../shared/peers, on the same local cluster of real
// processes, and companion mode (our pool controller beside
// kubernetes-nmstate's handler) against the per-node policies admins write
// for that handler today (make bench-peer; docs/benchmarks.md, "Beside
// kubernetes-nmstate"). It skips without the peers folder.
package peerbench

import (
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	nodeCounts = flag.String("peer.nodes", "25,100", "comma-separated node counts, one local cluster per handler each")
	runs       = flag.Int("peer.runs", 3, "rollouts of each case; the times reported are their median")
	handlers   = flag.String("peer.handlers", "upstream,ours,companion",
		"the clusters to measure, in this order: upstream (kubernetes-nmstate's handler), ours, companion (kubernetes-nmstate's handler and our pool controller in companion mode)")
	onlyCases = flag.String("peer.cases", "", "comma-separated names of the cases to roll out (default: every case)")
	baseline  = flag.String("peer.baseline", "",
		"a commit of this repository whose handler and pool controller (with its CRDs) the cluster \"baseline\" of -peer.handlers runs, "+
			"the cases of ours, for an A/B in the same run")
)

// A rollout case: a plain policy that changes eth1's MTU (what
// kubernetes-nmstate does), with the default maxUnavailable (50%) or 100%;
// for our handler, one that also puts an address from a pool on eth2; on
// kubernetes-nmstate's handler, that address typed into one policy per
// node, as admins write them today; and in companion mode, the pooled
// policy as a PooledNodeNetworkConfigurationPolicy, which becomes one
// policy per node.
type rolloutCase struct {
	name           string
	maxUnavailable string // "" for the default
	pooled         bool
	// on lists the clusters the case runs on.
	on []string
	// perNode: one policy per node, the address typed in; companion: a
	// pooled policy of companion mode.
	perNode, companion bool
}

const (
	upstreamCluster  = "upstream"
	oursCluster      = "ours"
	companionCluster = "companion"
	// baselineCluster runs our handler and pool controller of
	// -peer.baseline, and the cases of ours; companionBaselineCluster
	// kubernetes-nmstate's handler beside our pool controller of
	// -peer.baseline in companion mode, and the cases of companion.
	baselineCluster          = "baseline"
	companionBaselineCluster = "companion-baseline"
)

// clusters are the kinds of cluster, in the order the report lists them.
var clusters = []string{upstreamCluster, baselineCluster, oursCluster, companionBaselineCluster, companionCluster}

// runsOn reports whether a case runs on a kind of cluster.
func (c rolloutCase) runsOn(kind string) bool {
	switch kind {
	case baselineCluster:
		kind = oursCluster
	case companionBaselineCluster:
		kind = companionCluster
	}
	return slices.Contains(c.on, kind)
}

var cases = []rolloutCase{
	{name: "plain", on: []string{upstreamCluster, oursCluster}},
	{name: "plain, maxUnavailable 100%", maxUnavailable: "100%", on: []string{upstreamCluster, oursCluster}},
	{name: "pooled", pooled: true, on: []string{oursCluster}},
	{name: "per-node policies", pooled: true, perNode: true, on: []string{upstreamCluster}},
	{name: "pooled, companion mode", pooled: true, companion: true, on: []string{companionCluster}},
}

// figures are one case's measurements on one cluster.
type figures struct {
	rollout                 time.Duration      // median
	requests, watchEvents   float64            // per node and rollout
	writes                  float64            // per rollout, all nodes
	writesBy                map[string]float64 // per rollout, by "VERB resource[/subresource]"
	readsBy                 map[string]float64 // per rollout, GET and LIST, likewise
	cpu                     time.Duration      // handlers' CPU per node and rollout
	rssPerNode              float64            // bytes, after the rollouts
	anonPerNode             float64            // of rssPerNode, anonymous (not the binary's pages)
	floor                   time.Duration      // the same writes, at full concurrency
	apiServerCPUPerRollout  time.Duration
	poolControllerCPU       time.Duration // per rollout; ours only
	poolControllerRSS       float64       // bytes, after the rollouts
	floorRSS, floorAnon     float64       // bytes: the floor process's (see floor/)
	rolloutsMeasured, nodes int
}

// BenchmarkPeer rolls the cases out on a local cluster of N simulated
// nodes run by kubernetes-nmstate's handler, then on one run by ours, and
// reports per case: the rollout time (median of -peer.runs), API requests
// and watch events per node, handler CPU and memory per node, the floor
// (the rollout's API writes issued at full concurrency by a load
// generator against the same server), and ours ÷ upstream.
//
//	go test -run '^$' -bench Peer -benchtime 1x ./test/peerbench/ -args -peer.nodes 25,100
func BenchmarkPeer(b *testing.B) {
	peer, err := envtest.PeerHandler()
	must(b, err)
	if peer == "" {
		b.Skip("no kubernetes-nmstate source in ../shared/peers: its handler cannot be built")
	}
	bin := filepath.Join(b.TempDir(), "bin")
	must(b, envtest.BuildCommands(bin, "handler", "pool-controller", "nmstatectl-sim", "localcluster"))
	must(b, envtest.BuildCommands(bin, "kubectl-nodeippool"))
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "floor"), "./test/peerbench/floor")
	build.Dir = envtest.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the floor process: %v\n%s", err, out)
	}
	kinds := strings.Split(*handlers, ",")
	var base *baselineBuild
	switch {
	case slices.Contains(kinds, baselineCluster), slices.Contains(kinds, companionBaselineCluster):
		base = buildBaseline(b, bin)
	case *baseline != "":
		b.Fatalf("-peer.baseline %s: add %s or %s to -peer.handlers to measure it", *baseline, baselineCluster, companionBaselineCluster)
	}
	for _, f := range strings.Split(*nodeCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-peer.nodes: %q is not a node count", f)
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				measured := map[string]map[string]figures{}
				for _, h := range kinds {
					measured[h] = measure(b, bin, peer, n, h, base)
				}
				report(b, n, measured)
			}
		})
	}
}
