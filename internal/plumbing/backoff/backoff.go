// Package backoff computes the waits between retries from a wait.Backoff
// schedule: the one way retries are spaced here, for a policy's apply that
// failed (the handler, without jitter, counted in the enactment) and for a
// write that met a conflict (the pool writer, with jitter); and the
// schedule of every controller's failed reconciles (Requeues).
package backoff

import (
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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

// MaxRequeue is the longest a reconcile that failed waits for its retry.
// The workqueue's default schedule doubles up to 1000 s, so a pool or an
// enactment that failed a dozen times in a row (an API server under load)
// would wait a quarter of an hour for its next look while nodes wait for
// addresses.
const MaxRequeue = 30 * time.Second

// Requeues is the retry schedule of every controller here: the
// workqueue's default (per item from 5 ms, doubling; at most 10 retries a
// second overall, in bursts of 100), capped at MaxRequeue.
func Requeues() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRequeue),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
