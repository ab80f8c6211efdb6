package batch

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func req(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// TestWindowQueuesAtMostOnceAWindow follows one request's events: the
// first after a quiet window goes at once, those within the window join
// one add at its end, and the next window's events join one add a window
// later, never two adds less than a window apart.
func TestWindowQueuesAtMostOnceAWindow(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	w := NewWindowWithClock(200*time.Millisecond, clk)
	a := req("a")
	steps := []struct {
		at    time.Duration // since start
		after time.Duration
	}{
		{0, 0}, // quiet: at once
		{50 * time.Millisecond, 150 * time.Millisecond},  // joins the add due at 200 ms
		{199 * time.Millisecond, 1 * time.Millisecond},   // the same add
		{200 * time.Millisecond, 200 * time.Millisecond}, // the add due now may have begun: the next window's, at 400 ms
		{250 * time.Millisecond, 150 * time.Millisecond}, // joins it
		{390 * time.Millisecond, 10 * time.Millisecond},  // joins it
		{650 * time.Millisecond, 0},                      // a window after the add at 400 ms: at once
		{700 * time.Millisecond, 150 * time.Millisecond}, // within the window of 650 ms
		{2 * time.Second, 0},                             // long quiet
	}
	for _, s := range steps {
		clk.SetTime(start.Add(s.at))
		if got := w.after(a); got != s.after {
			t.Errorf("event at %v: queued after %v, want %v", s.at, got, s.after)
		}
	}
}

// TestWindowsOfRequestsAreTheirOwn: one request's busy window does not
// hold another's first event, and a delay of zero queues every event.
func TestWindowsOfRequestsAreTheirOwn(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	w := NewWindowWithClock(200*time.Millisecond, clk)
	if got := w.after(req("a")); got != 0 {
		t.Fatalf("first event of a: after %v, want 0", got)
	}
	clk.SetTime(start.Add(10 * time.Millisecond))
	if got := w.after(req("b")); got != 0 {
		t.Errorf("first event of b while a's window runs: after %v, want 0", got)
	}
	if got := w.after(req("a")); got != 190*time.Millisecond {
		t.Errorf("second event of a: after %v, want 190ms", got)
	}
	zero := NewWindowWithClock(0, clk)
	for range 3 {
		if got := zero.after(req("a")); got != 0 {
			t.Errorf("delay 0: after %v, want 0", got)
		}
	}
}

// TestWindowForgetsQuietRequests: the requests quiet for a window are
// swept, and one swept is queued at once as before.
func TestWindowForgetsQuietRequests(t *testing.T) {
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	w := NewWindowWithClock(200*time.Millisecond, clk)
	for _, n := range []string{"a", "b", "c"} {
		w.after(req(n))
	}
	clk.SetTime(start.Add(time.Second))
	if got := w.after(req("d")); got != 0 {
		t.Fatalf("d: after %v, want 0", got)
	}
	if len(w.due) != 1 {
		t.Errorf("remembered %d requests after a quiet second, want only d", len(w.due))
	}
	if got := w.after(req("a")); got != 0 {
		t.Errorf("a after being swept: after %v, want 0", got)
	}
}
