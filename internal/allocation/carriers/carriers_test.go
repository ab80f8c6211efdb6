package carriers

import (
	"net/netip"
	"testing"
	"time"
)

// TestHoldingDepartedNodes: what a deleted Node's state shows counts as
// carried for Hold from when the Node was deleted, however seldom it is
// asked about; a Node deleted before anything watched counts from when it
// is first found gone; a Node that comes back, or whose state is
// collected, is forgotten, and held afresh if it is deleted again.
func TestHoldingDepartedNodes(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.1")
	gone := map[netip.Addr][]string{ip: {"node01"}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Carriers{Hold: 30 * time.Second}
	held := func(at time.Duration) bool { return len(c.holding(gone, t0.Add(at))[ip]) > 0 }
	steps := []struct {
		name string
		do   func()
		at   time.Duration
		held bool
	}{
		{"found gone, never seen deleted", nil, 0, true},
		{"", nil, 29 * time.Second, true},
		{"the hold counts from the first finding", nil, 30 * time.Second, false},
		{"forgotten, then found gone again", func() { c.returned("node01") }, 40 * time.Second, true},
		{"deleted again, seen by the watch", func() { c.returned("node01"); c.departedAt("node01", t0.Add(50*time.Second)) }, 79 * time.Second, true},
		{"", nil, 80 * time.Second, false},
		{"state collected, then deleted again", func() { c.returned("node01"); c.departedAt("node01", t0.Add(90*time.Second)) }, 119 * time.Second, true},
		{"long after, asked once", nil, time.Hour, false},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := held(s.at); got != s.held {
			t.Errorf("%s at %v: held %v, want %v", s.name, s.at, got, s.held)
		}
	}
	if got := (&Carriers{}).holding(gone, t0); len(got) != 0 {
		t.Errorf("without a hold: held %v", got)
	}
}
