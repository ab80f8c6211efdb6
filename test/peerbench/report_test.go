package peerbench

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// report prints one node count's figures and the ratios against the
// baselines of the same run: ours ÷ upstream's plain policy, companion
// mode ÷ the per-node policies admins write for upstream's handler today,
// and ours ÷ ours at -peer.baseline.
func report(b *testing.B, n int, measured map[string]map[string]figures) {
	var out bytes.Buffer
	fmt.Fprintf(&out, "\n%d nodes, %d rollouts per case (median time)\n", n, *runs)
	fmt.Fprintf(&out, "%-28s %-9s %9s %9s %10s %10s %9s %9s %9s %10s %9s %10s %9s\n", "case", "cluster", "rollout", "floor",
		"req/node", "watch/node", "cpu/node", "MB/node", "anon MB", "apisrv cpu", "writes", "poolctl cpu", "poolctl MB")
	for _, c := range cases {
		for _, cluster := range clusters {
			f, ok := measured[cluster][c.name]
			if !ok {
				continue
			}
			fmt.Fprintf(&out, "%-28s %-9s %8.2fs %8.2fs %10.1f %10.1f %8.3fs %9.1f %9.1f %9.2fs %9.0f %9.2fs %9.1f\n", c.name, cluster,
				f.rollout.Seconds(), f.floor.Seconds(), f.requests, f.watchEvents, f.cpu.Seconds(), f.rssPerNode/(1<<20),
				f.anonPerNode/(1<<20), f.apiServerCPUPerRollout.Seconds(), f.writes, f.poolControllerCPU.Seconds(), f.poolControllerRSS/(1<<20))
		}
	}
	upstream, ours, companion := measured[upstreamCluster], measured[oursCluster], measured[companionCluster]
	for _, cluster := range clusters[1:] {
		for _, c := range cases {
			if f, ok := measured[cluster][c.name]; ok {
				fmt.Fprintf(&out, "%s (%s) writes per node: %s\n", cluster, c.name, perNode(f.writesBy, nil, n))
			}
		}
	}
	for _, cluster := range clusters {
		for _, c := range cases {
			if f, ok := measured[cluster][c.name]; ok {
				floor := "did not run (its log is the cluster's logs/floor.log)"
				if f.floorRSS > 0 {
					floor = fmt.Sprintf("%.1f MB (%.1f MB anonymous)", f.floorRSS/(1<<20), f.floorAnon/(1<<20))
				}
				fmt.Fprintf(&out, "%s: handler memory per node %.1f MB (%.1f MB anonymous); the floor process beside it, a "+
					"controller-runtime manager watching Nodes: %s\n", cluster, f.rssPerNode/(1<<20), f.anonPerNode/(1<<20), floor)
				break
			}
		}
	}
	if plain, ok := ours["plain"]; ok {
		if pooled, ok := ours["pooled"]; ok {
			fmt.Fprintf(&out, "ours pooled - plain, writes per node: %s\n", perNode(pooled.writesBy, plain.writesBy, n))
			fmt.Fprintf(&out, "ours pooled - plain, reads per node: %s\n", perNode(pooled.readsBy, plain.readsBy, n))
		}
	}
	for _, c := range cases {
		o, ok := ours[c.name]
		base, baseOK := measured[baselineCluster][c.name]
		if !ok || !baseOK {
			continue
		}
		fmt.Fprintf(&out, "ours (%s) ÷ baseline %s (%s): rollout x%.3f, floor x%.2f, writes x%.2f, requests/node x%.2f, cpu/node x%.2f, "+
			"pool controller cpu x%.2f\n", c.name, short(*baseline), c.name, ratio(o.rollout, base.rollout), ratio(o.floor, base.floor),
			o.writes/base.writes, o.requests/base.requests, ratio(o.cpu, base.cpu), ratio(o.poolControllerCPU, base.poolControllerCPU))
		if c.name == "plain" {
			b.ReportMetric(ratio(o.rollout, base.rollout), "ours/baseline")
		}
	}
	if base, ok := upstream["plain"]; ok {
		for _, c := range cases {
			if f, ok := ours[c.name]; ok {
				fmt.Fprintf(&out, "ours (%s) ÷ upstream (plain): rollout x%.3f, requests/node x%.2f, watch events/node x%.2f, cpu/node x%.2f\n",
					c.name, ratio(f.rollout, base.rollout), f.requests/base.requests, f.watchEvents/base.watchEvents, ratio(f.cpu, base.cpu))
			}
		}
		const full = "plain, maxUnavailable 100%"
		if u, ok := upstream[full]; ok {
			if o, ok := ours[full]; ok {
				fmt.Fprintf(&out, "ours ÷ upstream (%s): rollout x%.3f\n", full, ratio(o.rollout, u.rollout))
			}
		}
		if o, ok := ours["plain"]; ok {
			b.ReportMetric(ratio(o.rollout, base.rollout), "ours/upstream")
		}
		if f, ok := companion["pooled, companion mode"]; ok {
			fmt.Fprintf(&out, "companion ÷ upstream (plain): rollout x%.3f, requests/node x%.2f, watch events/node x%.2f, cpu/node x%.2f\n",
				ratio(f.rollout, base.rollout), f.requests/base.requests, f.watchEvents/base.watchEvents, ratio(f.cpu, base.cpu))
		}
	}
	if perNode, ok := upstream["per-node policies"]; ok {
		if f, ok := companion["pooled, companion mode"]; ok {
			fmt.Fprintf(&out, "companion ÷ upstream (per-node policies): rollout x%.3f, requests/node x%.2f, watch events/node x%.2f, cpu/node x%.2f\n",
				ratio(f.rollout, perNode.rollout), f.requests/perNode.requests, f.watchEvents/perNode.watchEvents, ratio(f.cpu, perNode.cpu))
			b.ReportMetric(ratio(f.rollout, perNode.rollout), "companion/per-node")
		}
	}
	if base, ok := measured[companionBaselineCluster]["pooled, companion mode"]; ok {
		if f, ok := companion["pooled, companion mode"]; ok {
			fmt.Fprintf(&out, "companion ÷ companion at baseline %s: rollout x%.3f, pool controller cpu x%.2f (%.3f s per node, against %.3f), "+
				"pool controller memory x%.2f, requests/node x%.2f\n", short(*baseline), ratio(f.rollout, base.rollout),
				ratio(f.poolControllerCPU, base.poolControllerCPU), f.poolControllerCPU.Seconds()/float64(n), base.poolControllerCPU.Seconds()/float64(n),
				f.poolControllerRSS/base.poolControllerRSS, f.requests/base.requests)
			b.ReportMetric(ratio(f.poolControllerCPU, base.poolControllerCPU), "companion-poolctl-cpu/baseline")
		}
	}
	// On standard output: go test cuts a benchmark's log after ten lines.
	fmt.Print(out.String())
}

// perNode lists the writes of by, less those of base (nil: none), per
// node, largest first, leaving out those under 0.05 per node.
func perNode(by, base map[string]float64, n int) string {
	type kind struct {
		name string
		v    float64
	}
	var kinds []kind
	for k, v := range by {
		kinds = append(kinds, kind{k, (v - base[k]) / float64(n)})
	}
	for k, v := range base {
		if _, ok := by[k]; !ok {
			kinds = append(kinds, kind{k, -v / float64(n)})
		}
	}
	slices.SortFunc(kinds, func(a, b kind) int {
		if c := cmp.Compare(math.Abs(b.v), math.Abs(a.v)); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for _, k := range kinds {
		if math.Abs(k.v) >= 0.05 {
			if base != nil {
				parts = append(parts, fmt.Sprintf("%+.2f %s", k.v, k.name))
			} else {
				parts = append(parts, fmt.Sprintf("%.2f %s", k.v, k.name))
			}
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// short is a commit's abbreviated name.
func short(commit string) string {
	return commit[:min(len(commit), 12)]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}
