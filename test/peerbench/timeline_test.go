package peerbench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

var timeline = flag.Bool("peer.timeline", false,
	"print, for each rollout of one policy, when its enactments were created, recorded an address, were granted their slot "+
		"and became Available, from a watch of the enactments (docs/benchmarks.md, \"The waits of a rollout\")")

// phases are the steps of an enactment in a rollout, in order.
var phases = []string{"created", "recorded", "granted", "available"}

// rolloutWatch follows the enactments of one policy from before its
// creation, and remembers when each reached each phase.
type rolloutWatch struct {
	w     watch.Interface
	start time.Time
	// limit is the policy's maxUnavailable in nodes.
	limit int
	// seen is, by enactment and phase, when the watch first showed it.
	seen map[string]map[string]time.Time
	done chan struct{}
}

// watchRollout starts following the enactments of the policy name, which
// applies on at most limit nodes at once; nil without -peer.timeline.
func (m *meter) watchRollout(name string, limit int) *rolloutWatch {
	if !*timeline {
		return nil
	}
	w, err := m.k.Watch(context.Background(), &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
		client.MatchingLabels{shared.EnactmentPolicyLabel: name})
	must(m.b, err)
	rw := &rolloutWatch{w: w, limit: limit, seen: map[string]map[string]time.Time{}, done: make(chan struct{})}
	go rw.follow()
	return rw
}

func (rw *rolloutWatch) follow() {
	defer close(rw.done)
	for ev := range rw.w.ResultChan() {
		e, ok := ev.Object.(*nncev1beta1.NodeNetworkConfigurationEnactment)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		now := time.Now()
		marks := rw.seen[e.Name]
		if marks == nil {
			marks = map[string]time.Time{}
			rw.seen[e.Name] = marks
		}
		for _, p := range reached(e) {
			if _, ok := marks[p]; !ok {
				marks[p] = now
			}
		}
	}
}

// reached returns the phases e shows it reached.
func reached(e *nncev1beta1.NodeNetworkConfigurationEnactment) []string {
	out := []string{"created"}
	for _, a := range e.Status.IPPool {
		if len(a.Allocated) > 0 {
			out = append(out, "recorded")
			break
		}
	}
	if e.Status.Slot != nil && e.Status.Slot.Granted != nil {
		out = append(out, "granted")
	}
	if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionAvailable); c != nil && c.Status == corev1.ConditionTrue {
		out = append(out, "available")
	}
	return out
}

// report stops the watch and prints, for each phase, when the enactments
// reached it (since the policy's creation) and how long each took from
// the phase before it (a node whose watch missed a phase, a slot granted
// and ended between two events, is left out of that step).
func (rw *rolloutWatch) report(name string) {
	if rw == nil {
		return
	}
	rw.w.Stop()
	<-rw.done
	var at, steps []string
	for i, p := range phases {
		var since, step []time.Duration
		for _, marks := range rw.seen {
			t, ok := marks[p]
			if !ok {
				continue
			}
			since = append(since, t.Sub(rw.start))
			if i == 0 {
				continue
			}
			if prev, ok := latestBefore(marks, i); ok {
				step = append(step, t.Sub(prev))
			}
		}
		if len(since) == 0 {
			continue
		}
		at = append(at, fmt.Sprintf("%s %d: %s", p, len(since), spread(since)))
		if len(step) > 0 {
			steps = append(steps, fmt.Sprintf("→%s %s", p, spread(step)))
		}
	}
	fmt.Printf("  timeline of %s (s since its creation; min/p50/p90/max): %s\n    each node's step from the phase before: %s\n",
		name, strings.Join(at, ", "), strings.Join(steps, ", "))
	if turns := rw.turnarounds(); len(turns) > 0 {
		fmt.Printf("    slot turnaround (the n-th grant after the (n-%d)-th node became Available): %s over %d grants\n",
			rw.limit, spread(turns), len(turns))
	}
}

// turnarounds returns, for each grant beyond the first limit, how long
// after the slot it took freed up it came: the i-th grant against the
// (i-limit)-th Available, both in the order they were seen.
func (rw *rolloutWatch) turnarounds() []time.Duration {
	var grants, available []time.Time
	for _, marks := range rw.seen {
		if t, ok := marks["granted"]; ok {
			grants = append(grants, t)
		}
		if t, ok := marks["available"]; ok {
			available = append(available, t)
		}
	}
	slices.SortFunc(grants, time.Time.Compare)
	slices.SortFunc(available, time.Time.Compare)
	var out []time.Duration
	for i := rw.limit; rw.limit > 0 && i < len(grants) && i-rw.limit < len(available); i++ {
		out = append(out, grants[i].Sub(available[i-rw.limit]))
	}
	return out
}

// latestBefore returns when the node reached the last phase before
// phases[i] that it was seen to reach.
func latestBefore(marks map[string]time.Time, i int) (time.Time, bool) {
	for j := i - 1; j >= 0; j-- {
		if t, ok := marks[phases[j]]; ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// spread formats the minimum, median, 90th percentile and maximum of d.
func spread(d []time.Duration) string {
	slices.Sort(d)
	q := func(f float64) float64 { return d[int(f*float64(len(d)-1))].Seconds() }
	return fmt.Sprintf("%.2f/%.2f/%.2f/%.2f", q(0), q(0.5), q(0.9), q(1))
}
