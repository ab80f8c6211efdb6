package pool

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// askAgainAfter is how long the controller waits for a holder to answer a
// request for its network state before it asks again (the handler may have
// been down, or may have failed to take the address off): a tenth of the
// quarantine period, 30s by default, and at least a second.
func askAgainAfter(period time.Duration) time.Duration {
	return max(period/10, time.Second)
}

// noStatePublished is what StateSeenAtRelease holds when the holder had
// published no NodeNetworkState at the release: any state it publishes is
// later.
var noStatePublished = metav1.NewTime(time.Unix(0, 0).UTC())

// holderView is what the API server says of a quarantined address's former
// holder, read after the address's record was looked for.
type holderView struct {
	// recorded: an enactment still records the address (the release has
	// not dropped the record yet, or the address came back to its holder).
	recorded bool
	// nodeGone: no Node of the holder's name exists.
	nodeGone bool
	// nodeUID is the UID of the Node of the holder's name.
	nodeUID types.UID
	// nodeDeleting: the Node is deleted and waits for its finalizers (in
	// companion mode, for its pooled policies' releases to be applied).
	nodeDeleting bool
	// state is the holder's NodeNetworkState, nil when it has none.
	state *nncev1beta1.NodeNetworkState
}

// verdict is what the controller does with one quarantine.
type verdict struct {
	// lift, when its why is set, frees the address.
	lift lift
	// seen, when set, is the holder's state time to record as
	// StateSeenAtRelease: the first look after the release.
	seen *metav1.Time
	// ask: request a fresh NodeNetworkState from the holder.
	ask bool
	// overdue, when its reason is set, is why the quarantine outlasted its
	// period.
	overdue overdue
}

// overdue is a quarantine that outlasted the quarantine period.
type overdue struct {
	reason, message string
}

// judgeQuarantine decides what to do with the quarantine q of a pool at
// now, from what the API server says of its holder (see docs/protocol.md,
// "Lifting a quarantine"). Only evidence frees an address: the holder's
// Node gone (for hold since the release, at most period), or a NodeNetworkState
// the holder published after the release without the address. The first look after the release records the time
// of the holder's state then, and asks for a new one. Time only decides
// when to ask again and when to report the quarantine overdue.
func judgeQuarantine(q ippoolv1.QuarantinedAddress, h holderView, now time.Time, period, hold time.Duration) verdict {
	switch {
	case h.recorded:
		return verdict{}
	case q.Node == "":
		return verdict{lift: lift{why: "no node held it"}}
	case h.nodeGone && now.Sub(q.Since.Time) < min(hold, period):
		// The machine of a deleted Node may still run (drained, its Node
		// deleted, powered off later): its handler takes the address off
		// meanwhile. The hold only delays; the Node gone is the evidence.
		return verdict{}
	case h.nodeGone:
		if q.Capture == "" || q.HolderName() == "" {
			return verdict{lift: lift{why: fmt.Sprintf("node %s is gone", q.Node)}}
		}
		// Kept for a quarantine period from now: the departure hold has
		// used up to a whole period of the release's already.
		return verdict{lift: lift{why: fmt.Sprintf("node %s is gone; kept for its return until %s", q.Node,
			now.Add(period).UTC().Format(time.RFC3339)), keep: true, keptSince: metav1.NewTime(now)}}
	}
	published, iface, carried := stateOf(h.state, q.IP)
	if q.StateSeenAtRelease == nil {
		seen := noStatePublished
		if h.state != nil {
			seen = h.state.Status.LastSuccessfulUpdateTime
		}
		return verdict{seen: &seen, ask: true}
	}
	fresh := h.state != nil && published.After(q.StateSeenAtRelease.Time)
	if fresh && !carried {
		returns := q.Capture != "" && q.HolderName() != ""
		switch {
		case returns && q.NodeUID != "" && h.nodeUID != q.NodeUID:
			// A new Node of the name: the old one is gone, and its
			// replacement gets the address back first.
			return verdict{lift: lift{why: fmt.Sprintf("node %s was replaced under its name and does not carry it; kept for its return until %s",
				q.Node, q.Since.Add(period).UTC().Format(time.RFC3339)), keep: true}}
		case returns && h.nodeDeleting:
			// A departure whose Node waits for its finalizers: kept for
			// the node's return, as when the Node is already gone.
			return verdict{lift: lift{why: fmt.Sprintf("node %s showed it gone while its Node is being deleted; kept for its return until %s",
				q.Node, now.Add(period).UTC().Format(time.RFC3339)), keep: true, keptSince: metav1.NewTime(now)}}
		}
		return verdict{lift: lift{why: fmt.Sprintf("node %s showed it gone", q.Node)}}
	}
	// A hold of what the node was found carrying, whose fresh state still
	// shows it, waits for the node's next state (poolsAwaitingState): no
	// handler takes such an address off, so asking again would only have
	// the node write the same state every time.
	held := fresh && carried && q.HolderName() == ""
	v := verdict{ask: !held && now.Sub(stateRequested(h.state)) >= askAgainAfter(period)}
	if age := now.Sub(q.Since.Time); age >= period {
		v.overdue = overdueOf(q, fresh, iface, published, age)
	}
	return v
}

// overdueOf describes a quarantine past its period: its holder still shows
// the address (fresh), or has published nothing since the release.
func overdueOf(q ippoolv1.QuarantinedAddress, fresh bool, iface string, published time.Time, age time.Duration) overdue {
	if fresh && q.HolderName() == "" {
		// Found on the node, recorded by no holder: no release took
		// it, so no handler takes it off.
		return overdue{ippoolv1.ReasonAddressStillCarried, fmt.Sprintf(
			"%s, found %s ago on interface %s of node %s and recorded by no holder, is held for that node: a policy or pooled "+
				"policy that puts an address of this pool on %s there adopts it, or take %s off by hand to free it",
			q.IP, age.Round(time.Second), cmp.Or(iface, "?"), q.Node, cmp.Or(iface, "that interface"), q.IP)}
	}
	released := fmt.Sprintf("%s, released by node %s %s ago", q.IP, q.Node, age.Round(time.Second))
	if fresh {
		return overdue{ippoolv1.ReasonAddressStillCarried, fmt.Sprintf(
			"%s, is still on its interface %s (its NodeNetworkState of %s); its handler retries taking it off: see the pool's "+
				"ReleaseFailed Events, or take %s off %s by hand; delete the Node if the machine is gone",
			released, cmp.Or(iface, "?"), published.UTC().Format(time.RFC3339), q.IP, cmp.Or(iface, "the interface"))}
	}
	return overdue{ippoolv1.ReasonReleaseUnconfirmed, fmt.Sprintf(
		"%s: node %s has published no network state since; check its handler pod, or delete the Node if the machine is gone",
		released, q.Node)}
}

// stateOf returns when a NodeNetworkState was published (the zero time
// without one), and the interface that carries ip in it.
func stateOf(nns *nncev1beta1.NodeNetworkState, s string) (published time.Time, iface string, carried bool) {
	if nns == nil {
		return time.Time{}, "", false
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return nns.Status.LastSuccessfulUpdateTime.Time, "", false
	}
	iface, carried = netstate.Carriers(nns.Status.CurrentState.Raw)[ip]
	return nns.Status.LastSuccessfulUpdateTime.Time, iface, carried
}

// stateRequested returns when the state of a NodeNetworkState was last
// asked for (its RefreshStateLabel, in Unix nanoseconds), or the zero
// time.
func stateRequested(nns *nncev1beta1.NodeNetworkState) time.Time {
	if nns == nil {
		return time.Time{}
	}
	n, err := strconv.ParseInt(nns.Labels[ippoolv1.RefreshStateLabel], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// holders reads, for each quarantine of pool, what the API server says of
// its former holder: its Node, then its NodeNetworkState. claims come from
// enactments listed from the API server before any state is read here, so
// a state read here is read after any record claims lists as gone. With
// many quarantines (after a policy over hundreds of nodes is deleted) the
// Nodes are listed once (listNodesFrom) and the states read
// lifecycle.ReadsAtOnce at once, or listed once from listStatesFrom nodes
// on: hundreds of reads in a row kept the pool's next pass, which serves
// the nodes waiting for an address, waiting for seconds.
func (r maintainer) holders(ctx context.Context, pool *ippoolv1.NodeIPPool, owners poolstatus.Owners) (map[string]holderView, error) {
	out := make(map[string]holderView, len(pool.Status.Quarantined))
	nodes := &nodemeta.Lookup{Reader: r.APIReader, List: len(pool.Status.Quarantined) >= r.listNodesFrom()}
	var live []string
	for _, q := range pool.Status.Quarantined {
		var h holderView
		if ip, err := netip.ParseAddr(q.IP); err == nil && len(owners.Recognized(ip)) > 0 {
			h.recorded = true
		}
		if h.recorded || q.Node == "" {
			out[q.IP] = h
			continue
		}
		node, err := nodes.Node(ctx, q.Node)
		if err != nil {
			return nil, err
		}
		h.nodeUID, h.nodeGone, h.nodeDeleting = node.UID, node.Gone, node.Deleting
		if !node.Gone {
			live = append(live, q.Node)
		}
		out[q.IP] = h
	}
	states, err := lifecycle.ReadStates(ctx, r.APIReader, live, r.listStatesFrom())
	if err != nil {
		return nil, err
	}
	for _, q := range pool.Status.Quarantined {
		if h := out[q.IP]; !h.recorded && q.Node != "" && !h.nodeGone {
			h.state = states.ByNode[q.Node] // nil when the node has none
			out[q.IP] = h
		}
	}
	return out, nil
}

// DefaultListStatesFrom is how many nodes' states a look at the
// quarantines lists rather than reads, as lifecycle.ReadStates does for
// the nodes a pass serves.
const DefaultListStatesFrom = lifecycle.ListStatesFrom

// listStatesFrom is how many nodes' states a look at the quarantines lists
// rather than reads.
func (r maintainer) listStatesFrom() int {
	if r.ListStatesFrom <= 0 {
		return DefaultListStatesFrom
	}
	return r.ListStatesFrom
}

// asksAtOnce is how many nodes askForStates asks at once.
const asksAtOnce = 32

// askForStates asks each node to publish its network state again
// (RefreshStateLabel): its handler takes released addresses off first. A
// node whose NodeNetworkState is gone publishes one on its own. The asks
// go out asksAtOnce at a time: after a release by hundreds of nodes, one
// after another they kept the pool's next pass waiting.
func (r maintainer) askForStates(ctx context.Context, nodes []string) {
	label := strconv.FormatInt(r.Clock.Now().UnixNano(), 10)
	var g errgroup.Group
	g.SetLimit(asksAtOnce)
	for _, node := range nodes {
		g.Go(func() error {
			nns := &nncev1beta1.NodeNetworkState{}
			nns.Name = node
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`,
				ippoolv1.RefreshStateLabel, label))
			if err := r.Client.Patch(ctx, nns, patch); client.IgnoreNotFound(err) != nil {
				// The next look asks again.
				ctrl.LoggerFrom(ctx).Info("could not ask a node for its network state", "node", node, "error", err.Error())
			}
			return nil
		})
	}
	_ = g.Wait()
}

// releasesOf decides the ReleasesConfirmed condition from the overdue
// quarantines, by address.
func releasesOf(late map[string]overdue) availability {
	if len(late) == 0 {
		return availability{metav1.ConditionTrue, ippoolv1.ReasonReleasesConfirmed,
			"Every released address left its holder's network or is within its quarantine period"}
	}
	reason := ippoolv1.ReasonReleaseUnconfirmed
	msgs := make([]string, 0, len(late))
	for _, ip := range slices.Sorted(maps.Keys(late)) {
		o := late[ip]
		if o.reason == ippoolv1.ReasonAddressStillCarried {
			reason = o.reason
		}
		msgs = append(msgs, o.message)
	}
	return refused(reason, "Quarantined past the quarantine period, handed to nobody until the holder shows them gone: "+
		strings.Join(msgs[:min(len(msgs), 5)], "; ")+moreOf(len(msgs)-5))
}

func moreOf(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("; and %d more", n)
}
