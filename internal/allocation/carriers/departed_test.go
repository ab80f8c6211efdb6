package carriers

import (
	"net/netip"
	"testing"
	"time"
)

// TestDepartures: what a deleted Node's state showed counts as carried
// for the hold from the Node's last deletion, whether the state is
// collected before or after the Node's deletion is seen, however seldom
// it is asked about; a Node deleted unseen counts from when its state is
// first found without it; a Node registered again within the hold stays
// held (its machine may carry the addresses, its new state is not
// published); once the hold is over a node is not held afresh while its
// state stays, and is forgotten once the state is collected or its Node
// is back.
func TestDepartures(t *testing.T) {
	const hold = 30 * time.Second
	ip := netip.MustParseAddr("10.0.0.1")
	other := netip.MustParseAddr("10.0.0.2")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d departures
	state := true // node01's state is in the watch
	exists := func(string) bool { return state }
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	held := func(s int) []netip.Addr {
		var out []netip.Addr
		for a, nodes := range d.held(at(s), hold, exists) {
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
		at   int
		want []netip.Addr
	}{
		{"deleted, its state showing the address", func() { d.deleted("node01", t0, []netip.Addr{ip}) }, 0, []netip.Addr{ip}},
		{"its state collected", func() { state = false; d.collected("node01", at(5), hold, []netip.Addr{ip}) }, 10, []netip.Addr{ip}},
		{"", nil, 29, []netip.Addr{ip}},
		{"the hold is over", nil, 30, nil},
		{"forgotten once over and collected: found again, held afresh", func() {
			state = true
			d.found("node01", at(40), []netip.Addr{other})
		}, 69, []netip.Addr{other}},
		{"over, its state still there", nil, 70, nil},
		{"found again while its state stays: not held afresh", func() { d.found("node01", at(80), []netip.Addr{other}) }, 80, nil},
		{"deleted again: held from the last deletion", func() { d.deleted("node01", at(90), []netip.Addr{ip}) }, 119, []netip.Addr{ip}},
		{"registered again within the hold: still held", func() { d.back("node01", at(100), hold) }, 110, []netip.Addr{ip}},
		{"its state collected before the Node's deletion is seen", func() {
			d.back("node01", at(200), hold)
			d.collected("node01", at(200), hold, []netip.Addr{other})
		}, 201, []netip.Addr{other}},
		{"then the Node's deletion, the state gone from the watch", func() { d.deleted("node01", at(202), nil) }, 231, []netip.Addr{other}},
		{"", nil, 232, nil},
		{"registered again, its state collected after the hold, before its deletion is seen: held afresh", func() {
			state = true
			d.collected("node01", at(300), hold, []netip.Addr{ip})
		}, 329, []netip.Addr{ip}},
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
	d.back("node01", at(340), hold)
	if n := len(d.byNode); n != 0 {
		t.Errorf("%d nodes remembered once the Node is back after the hold, want 0", n)
	}
	d.found("node01", at(400), []netip.Addr{ip})
	state = false
	held(500)
	if n := len(d.byNode); n != 0 {
		t.Errorf("%d nodes remembered after the hold is over and the state collected, want 0", n)
	}
}
