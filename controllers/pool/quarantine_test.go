package pool

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// TestJudgeQuarantine: a quarantine is lifted only on evidence (the Node
// gone for the departure hold, or a state published after the release
// without the address),
// never because time passed; past the period it is reported, and the
// holder is asked again for its state.
func TestJudgeQuarantine(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	period := 5 * time.Minute
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	state := func(published time.Duration, carries bool, asked time.Duration) *nncev1beta1.NodeNetworkState {
		return stateOfNode(t0, published, carries, asked)
	}
	q := func(seen *metav1.Time, capture string) ippoolv1.QuarantinedAddress {
		return ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n1", NodeUID: "uid1", Holder: "n1.p", Capture: capture,
			Since: *at(0), StateSeenAtRelease: seen}
	}
	for _, tt := range []struct {
		name string
		q    ippoolv1.QuarantinedAddress
		h    holderView
		now  time.Duration
		// want: "lift: why", "keep: why", "seen T", "wait", with ",
		// ask" when the holder is asked, and ", overdue REASON".
		want string
	}{
		{"still recorded: the release is not done", q(nil, "addr"), holderView{recorded: true}, 10 * time.Minute, "wait"},
		{"the Node just went: its machine, if it runs, takes the address off meanwhile", q(at(0), "addr"), holderView{nodeGone: true},
			29 * time.Second, "wait"},
		{"the Node is gone: kept for its return", q(at(0), "addr"), holderView{nodeGone: true}, 30 * time.Second,
			"keep: node n1 is gone; kept for its return until 2026-01-01T12:05:30Z"},
		{"the Node is gone, a reset's address", q(at(0), ""), holderView{nodeGone: true}, time.Minute, "lift: node n1 is gone"},
		{"first look: the state then is recorded, and a new one asked for", q(nil, "addr"),
			holderView{nodeUID: "uid1", state: state(-time.Second, true, -time.Hour)}, time.Second, "seen 11:59:59, ask"},
		{"first look, no state ever published", q(nil, "addr"), holderView{nodeUID: "uid1"}, time.Second, "seen 00:00:00, ask"},
		{"a state published after the release without it", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", state: state(2*time.Second, false, time.Second)}, 3 * time.Second, "lift: node n1 showed it gone"},
		{"a state from before the release without it proves nothing", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", state: state(-time.Second, false, time.Second)}, 3 * time.Second, "wait"},
		{"the period passed, the state is still the one of the release: reported, asked again", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", state: state(-time.Second, false, time.Minute)}, 6 * time.Minute,
			"wait, ask, overdue ReleaseUnconfirmed"},
		{"the period passed and the holder still carries it: reported, never lifted", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", state: state(time.Minute, true, 5*time.Minute+50*time.Second)}, 6 * time.Minute,
			"wait, overdue AddressStillCarried"},
		{"a replacement under the name does not carry it: kept for its return", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid2", state: state(time.Minute, false, time.Second)}, 2 * time.Minute,
			"keep: node n1 was replaced under its name and does not carry it; kept for its return until 2026-01-01T12:05:00Z"},
		{"a Node being deleted shows it gone: kept for its return", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", nodeDeleting: true, state: state(2*time.Second, false, time.Second)}, 3 * time.Second,
			"keep: node n1 showed it gone while its Node is being deleted; kept for its return until 2026-01-01T12:05:03Z"},
		{"a Node being deleted shows a reset's address gone", q(at(-time.Second), ""),
			holderView{nodeUID: "uid1", nodeDeleting: true, state: state(2*time.Second, false, time.Second)}, 3 * time.Second,
			"lift: node n1 showed it gone"},
		{"a Node being deleted that still carries it", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid1", nodeDeleting: true, state: state(2*time.Second, true, time.Second)}, 3 * time.Second, "wait"},
		{"a replacement under the name that carries it (the same machine)", q(at(-time.Second), "addr"),
			holderView{nodeUID: "uid2", state: state(time.Minute, true, time.Second)}, 2 * time.Minute, "wait, ask"},
		{"no node held it", ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Since: *at(0)}, holderView{}, time.Second,
			"lift: no node held it"},
		{"held for the node that carries it, its fresh state still showing it: not asked again",
			ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n1", Since: *at(0), StateSeenAtRelease: at(-time.Second)},
			holderView{nodeUID: "uid1", state: state(2*time.Second, true, time.Second)}, 2 * time.Minute, "wait"},
		{"held for the node that carries it, no state since: asked again",
			ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n1", Since: *at(0), StateSeenAtRelease: at(-time.Second)},
			holderView{nodeUID: "uid1", state: state(-time.Second, true, time.Second)}, 2 * time.Minute, "wait, ask"},
		{"held for the node that carries it, shown gone: lifted",
			ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n1", Since: *at(0), StateSeenAtRelease: at(-time.Second)},
			holderView{nodeUID: "uid1", state: state(2*time.Second, false, time.Second)}, 3 * time.Second, "lift: node n1 showed it gone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := judgeQuarantine(tt.q, tt.h, t0.Add(tt.now), period, 30*time.Second)
			if got := describeVerdict(v); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func describeVerdict(v verdict) string {
	var parts []string
	switch {
	case v.lift.keep:
		parts = append(parts, "keep: "+v.lift.why)
	case v.lift.why != "":
		parts = append(parts, "lift: "+v.lift.why)
	case v.seen != nil:
		parts = append(parts, "seen "+v.seen.UTC().Format("15:04:05"))
	default:
		parts = append(parts, "wait")
	}
	if v.ask {
		parts = append(parts, "ask")
	}
	if v.overdue.reason != "" {
		parts = append(parts, "overdue "+v.overdue.reason)
	}
	return strings.Join(parts, ", ")
}

// TestOverdueStray: an address found on a node unrecorded, still carried
// past the period, is reported as held for that node, to adopt or take
// off by hand: no handler takes it off.
func TestOverdueStray(t *testing.T) {
	q := ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Node: "n1"}
	got := overdueOf(q, true, "eth1", time.Now(), 6*time.Minute)
	want := "10.0.0.5, found 6m0s ago on interface eth1 of node n1 and recorded by no holder, is held for that node: " +
		"a policy or pooled policy that puts an address of this pool on eth1 there adopts it, or take 10.0.0.5 off by hand to free it"
	if got.reason != ippoolv1.ReasonAddressStillCarried || got.message != want {
		t.Errorf("got %+v\nwant %s", got, want)
	}
	q.Holder = "n1.p"
	if got := overdueOf(q, true, "eth1", time.Now(), 6*time.Minute); !strings.Contains(got.message, "its handler retries taking it off") {
		t.Errorf("a released address: %+v", got)
	}
}

// TestReleasesOf: the condition names every overdue address, the
// carried ones first in its reason.
func TestReleasesOf(t *testing.T) {
	if got := releasesOf(nil); got.status != metav1.ConditionTrue {
		t.Errorf("no overdue quarantine: %+v", got)
	}
	got := releasesOf(map[string]overdue{
		"10.0.0.5": {ippoolv1.ReasonReleaseUnconfirmed, "10.0.0.5, released by node n1 6m0s ago: ..."},
		"10.0.0.6": {ippoolv1.ReasonAddressStillCarried, "10.0.0.6, released by node n2 6m0s ago, is still on its interface eth1 ..."},
	})
	if got.status != metav1.ConditionFalse || got.reason != ippoolv1.ReasonAddressStillCarried ||
		!strings.Contains(got.message, "10.0.0.5, released by node n1") || !strings.Contains(got.message, "10.0.0.6, released by node n2") {
		t.Errorf("two overdue quarantines: %+v", got)
	}
}

// stateOfNode is a node's NodeNetworkState published at t0+published, with
// 10.0.0.5 on eth1 when carries, last asked for at t0+asked.
func stateOfNode(t0 time.Time, published time.Duration, carries bool, asked time.Duration) *nncev1beta1.NodeNetworkState {
	nns := &nncev1beta1.NodeNetworkState{}
	nns.Status.LastSuccessfulUpdateTime = metav1.NewTime(t0.Add(published))
	addr := ""
	if carries {
		addr = `,"ipv4":{"address":[{"ip":"10.0.0.5","prefix-length":24}]}`
	}
	nns.Status.CurrentState = shared.NewState(`{"interfaces":[{"name":"eth1"` + addr + `}]}`)
	nns.Labels = map[string]string{ippoolv1.RefreshStateLabel: strconv.FormatInt(t0.Add(asked).UnixNano(), 10)}
	return nns
}
