package poolwrite

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := &Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Steps: 5, Rand: rand.New(rand.NewPCG(1, 2))}
	for _, tt := range []struct {
		attempt int
		base    time.Duration
	}{{1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {4, 80 * time.Millisecond}, {5, 100 * time.Millisecond}, {64, 100 * time.Millisecond}} {
		for range 100 {
			d := b.Delay(tt.attempt)
			if d < tt.base/2 || d >= tt.base*3/2 {
				t.Fatalf("attempt %d waited %s, want within [%s, %s)", tt.attempt, d, tt.base/2, tt.base*3/2)
			}
		}
	}
}
