package backoff

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestDelay(t *testing.T) {
	b := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 16 * time.Second,
		6: 30 * time.Second, 64: 30 * time.Second} {
		if got := Delay(b, n); got != want {
			t.Errorf("retry %d: %s, want %s", n, got, want)
		}
	}
	if got := Delay(wait.Backoff{Duration: time.Second}, 5); got != time.Second {
		t.Errorf("no factor: %s, want the duration", got)
	}
}

func TestJitteredDelay(t *testing.T) {
	j := &Jittered{Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: 100 * time.Millisecond, Steps: 5},
		Rand: rand.New(rand.NewPCG(1, 2))}
	for _, tt := range []struct {
		attempt int
		base    time.Duration
	}{{1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {4, 80 * time.Millisecond}, {5, 100 * time.Millisecond}, {64, 100 * time.Millisecond}} {
		for range 100 {
			d := j.Delay(tt.attempt)
			if d < tt.base/2 || d >= tt.base*3/2 {
				t.Fatalf("attempt %d waited %s, want within [%s, %s)", tt.attempt, d, tt.base/2, tt.base*3/2)
			}
		}
	}
}
