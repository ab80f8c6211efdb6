// Package backoff computes the waits between retries from a wait.Backoff
// schedule: the one way retries are spaced here, for a policy's apply that
// failed (the handler, without jitter, counted in the enactment) and for a
// write that met a conflict (the pool writer, with jitter).
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Delay returns the wait before retry n (1-based) of schedule b:
// b.Duration, multiplied by b.Factor for each retry before it, at most
// b.Cap when it is set. It ignores b.Jitter and b.Steps.
func Delay(b wait.Backoff, n int) time.Duration {
	d := float64(b.Duration)
	for i := 1; i < n; i++ {
		d *= max(b.Factor, 1)
		if b.Cap > 0 && d >= float64(b.Cap) {
			return b.Cap
		}
	}
	if b.Cap > 0 && d > float64(b.Cap) {
		return b.Cap
	}
	return time.Duration(d)
}

// Jittered spaces retries by a schedule, each wait scaled by a random
// factor in [0.5, 1.5) so that writers who met on one conflict do not
// meet again. After Steps attempts, the caller gives up. It is safe for
// concurrent use.
type Jittered struct {
	wait.Backoff
	// Rand is the jitter source, used under a lock.
	Rand *rand.Rand
	mu   sync.Mutex
}

// Delay returns how long to wait after the attempt-th attempt failed.
func (j *Jittered) Delay(attempt int) time.Duration {
	j.mu.Lock()
	f := 0.5 + j.Rand.Float64()
	j.mu.Unlock()
	return time.Duration(float64(Delay(j.Backoff, attempt)) * f)
}
