package pool

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/lifecycle"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
)

// formers are a holder of each kind on node n1 (Node UID uid1) giving up
// 10.0.0.5, built from the record that kind keeps, and whether the kind
// keeps a released address for the holder's return.
func formers() []struct {
	kind    string
	former  lifecycle.Former
	returns bool
} {
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "n1.p",
		Labels:          map[string]string{shared.EnactmentNodeLabel: "n1", shared.EnactmentPolicyLabel: "p"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid1"}}}}
	e.Status.IPPool = ippoolv1.EnactmentIPPools{"a": {Allocated: []string{"10.0.0.5"}}}
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{
		"addr": {State: shared.NewState(string(capture.Address{IP: netip.MustParseAddr("10.0.0.5"), PrefixLength: 24}.State()))}}

	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pp"}}
	rec := &ippoolv1.PooledPolicyNode{Node: "n1", NodeUID: "uid1"}

	return []struct {
		kind    string
		former  lifecycle.Former
		returns bool
	}{
		{"enactment", lifecycle.OfEnactment(e), true},
		{"pooled policy's node", lifecycle.OfPolicyNode(p, rec, []ippoolv1.PooledAddress{{Capture: "addr", Pool: "a", IP: "10.0.0.5"}}), true},
		{"Cluster API claim", lifecycle.OfClaim(holder.ForClaim("ns", "c"), "n1", "a", netip.MustParseAddr("10.0.0.5")), false},
		{"reset enactment", lifecycle.OfEnactment(e).WithoutReturn(), false},
	}
}

// TestEvidenceEveryKind judges the quarantine that each kind of holder
// leaves (lifecycle.Former.Entries, what Release writes) on the same
// evidence: only the node's state published after the release without the
// address, or its Node gone, lifts it, whatever the kind. The kinds differ
// in one thing alone: an address whose holder may come back (a capture
// keeps it) is kept for that return, where the others go to anyone.
func TestEvidenceEveryKind(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	period, hold := 5*time.Minute, 30*time.Second
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	// Last asked for long ago: the holder is asked again while it waits.
	state := func(published time.Duration, carries bool) *nncev1beta1.NodeNetworkState {
		return stateOfNode(t0, published, carries, -time.Hour)
	}
	// Each case: the evidence, and the verdict for a kind that keeps the
	// address for its holder's return, and for one that does not (as
	// describeVerdict writes them).
	cases := []struct {
		name       string
		h          holderView
		now        time.Duration
		kept, free string
	}{
		{"still recorded", holderView{recorded: true}, time.Hour, "wait", "wait"},
		{"the Node just went", holderView{nodeGone: true}, 10 * time.Second, "wait", "wait"},
		{"the Node gone past the hold", holderView{nodeGone: true}, time.Minute,
			"keep: node n1 is gone; kept for its return until 2026-01-01T12:06:00Z", "lift: node n1 is gone"},
		{"a state after the release without it", holderView{nodeUID: "uid1", state: state(2*time.Second, false)}, 3 * time.Second,
			"lift: node n1 showed it gone", "lift: node n1 showed it gone"},
		{"a state from before the release", holderView{nodeUID: "uid1", state: state(-2*time.Second, false)}, 3 * time.Second,
			"wait, ask", "wait, ask"},
		{"still carried past the period", holderView{nodeUID: "uid1", state: state(5*time.Minute, true)}, 6 * time.Minute,
			"wait, ask, overdue AddressStillCarried", "wait, ask, overdue AddressStillCarried"},
		{"a Node replaced under the name does not carry it", holderView{nodeUID: "uid2", state: state(2*time.Second, false)},
			3 * time.Second, "keep: node n1 was replaced under its name and does not carry it; kept for its return until 2026-01-01T12:05:00Z",
			"lift: node n1 showed it gone"},
		{"shown gone while the Node is deleted", holderView{nodeUID: "uid1", nodeDeleting: true, state: state(2*time.Second, false)},
			3 * time.Second, "keep: node n1 showed it gone while its Node is being deleted; kept for its return until 2026-01-01T12:05:03Z",
			"lift: node n1 showed it gone"},
	}
	for _, f := range formers() {
		entries := f.former.Entries(*at(0))
		if len(entries) != 1 || entries[0].Node != "n1" || entries[0].IP != "10.0.0.5" {
			t.Fatalf("%s: entries %+v, want one of 10.0.0.5 on n1", f.kind, entries)
		}
		q := entries[0]
		q.StateSeenAtRelease = at(-time.Second)
		for _, tc := range cases {
			t.Run(f.kind+"/"+tc.name, func(t *testing.T) {
				want := tc.free
				if f.returns {
					want = tc.kept
				}
				if got := describeVerdict(judgeQuarantine(q, tc.h, t0.Add(tc.now), period, hold)); got != want {
					t.Errorf("got  %q\nwant %q", got, want)
				}
			})
		}
	}
}

// TestEvidenceOfAClaimWithoutMachine: a claim whose machine never joined
// as a Node carried its address nowhere this cluster sees, and its
// quarantine names no node: nothing can show it gone, and nothing keeps it.
func TestEvidenceOfAClaimWithoutMachine(t *testing.T) {
	q := lifecycle.OfClaim(holder.ForClaim("ns", "c"), "", "a", netip.MustParseAddr("10.0.0.5")).Entries(metav1.Now())
	if len(q) != 1 {
		t.Fatalf("entries %+v", q)
	}
	got := describeVerdict(judgeQuarantine(q[0], holderView{}, time.Now(), 5*time.Minute, 30*time.Second))
	if !strings.HasPrefix(got, "lift: no node held it") {
		t.Errorf("got %q", got)
	}
}
