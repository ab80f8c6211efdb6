package carriers

import (
	"net/netip"
	"testing"
	"time"
)

// TestDepartures: what a deleted Node's state showed counts as carried
// for the hold from the Node's last deletion, whether its state is
// collected meanwhile or not, however seldom it is asked about; a Node
// deleted unseen counts from when its state is first found without it;
// a Node that comes back is forgotten; once the hold is over its node is
// not held afresh while its state stays, and forgotten once it is
// collected.
func TestDepartures(t *testing.T) {
	const hold = 30 * time.Second
	ip := netip.MustParseAddr("10.0.0.1")
	other := netip.MustParseAddr("10.0.0.2")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d departures
	state := true // node01's state is in the watch
	exists := func(string) bool { return state }
	held := func(at time.Duration) []netip.Addr {
		var out []netip.Addr
		for a, nodes := range d.held(t0.Add(at), hold, exists) {
			for _, n := range nodes {
				if n == "node01" {
					out = append(out, a)
				}
			}
		}
		return out
	}
	steps := []struct {
		name string
		do   func()
		at   time.Duration
		want []netip.Addr
	}{
		{"deleted, its state showing the address", func() { d.deleted("node01", t0, []netip.Addr{ip}) }, 0, []netip.Addr{ip}},
		{"its state collected", func() { state = false }, 10 * time.Second, []netip.Addr{ip}},
		{"", nil, 29 * time.Second, []netip.Addr{ip}},
		{"the hold is over", nil, 30 * time.Second, nil},
		{"forgotten once over and collected: found again, held afresh", func() {
			state = true
			d.found("node01", t0.Add(40*time.Second), []netip.Addr{other})
		}, 69 * time.Second, []netip.Addr{other}},
		{"over, its state still there", nil, 70 * time.Second, nil},
		{"found again while its state stays: not held afresh", func() { d.found("node01", t0.Add(80*time.Second), []netip.Addr{other}) }, 80 * time.Second, nil},
		{"deleted again: held from the last deletion", func() { d.deleted("node01", t0.Add(90*time.Second), []netip.Addr{ip}) }, 119 * time.Second, []netip.Addr{ip}},
		{"back", func() { d.back("node01") }, 100 * time.Second, nil},
		{"state collected before the watch saw the Node go", func() {
			d.collectedLive("node01", t0.Add(200*time.Second), []netip.Addr{other})
			d.deleted("node01", t0.Add(201*time.Second), nil)
		}, 230 * time.Second, []netip.Addr{other}},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		got := held(s.at)
		if len(got) != len(s.want) || (len(got) == 1 && got[0] != s.want[0]) {
			t.Errorf("%s at %v: held %v, want %v", s.name, s.at, got, s.want)
		}
	}
	if n := len(d.byNode); n != 1 {
		t.Errorf("%d nodes remembered, want 1", n)
	}
	state = false
	held(time.Hour)
	if n := len(d.byNode) + len(d.collected); n != 0 {
		t.Errorf("%d entries remembered after every hold is over and every state collected, want 0", n)
	}
}
