package poolwrite

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Backoff paces retries of a conflicting write: attempt n waits
// Initial*2^(n-1), capped at Max, scaled by a random factor in [0.5, 1.5).
// After Steps attempts the caller gives up.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Steps   int
	// Rand is the jitter source; it is used under a lock, so one Backoff
	// may serve concurrent callers.
	Rand *rand.Rand
	mu   sync.Mutex
}

// DefaultBackoff returns 10 attempts from 20ms up to 2s, seeded randomly.
func DefaultBackoff() *Backoff {
	return &Backoff{Initial: 20 * time.Millisecond, Max: 2 * time.Second, Steps: 10,
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// Delay returns how long to wait after the attempt-th attempt failed.
func (b *Backoff) Delay(attempt int) time.Duration {
	d := b.Initial << min(attempt-1, 30)
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	b.mu.Lock()
	f := 0.5 + b.Rand.Float64()
	b.mu.Unlock()
	return time.Duration(float64(d) * f)
}
