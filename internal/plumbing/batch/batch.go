// Package batch gathers the requests of watch events into windows, so that
// the events of one window join one reconcile: the workqueue keeps a
// request once however often it is added while it waits. A controller
// whose reconcile costs O(objects) and whose events come from every node
// then does O(objects) work per window instead of per event.
//
// The first event after a quiet window is queued at once, and the events
// that follow it within the window join one reconcile at the window's
// end: a request is queued at most once a window, and an event that
// finds its controller idle is not held back for a window it does not
// need. A rollout's stages (the pool controller's serve, the policy
// controller's grants) each answered a window late before.
package batch

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultDelay is the window of the controllers' batched watches.
const DefaultDelay = 200 * time.Millisecond

// Window queues requests at most once per delay each. One Window serves
// one controller: its event handlers share it, so that events of the
// enactments and of the pools of one pool join the same window.
type Window struct {
	delay time.Duration
	clock clock.PassiveClock

	mu sync.Mutex
	// due is, by request, when its latest add is (or was) due.
	due map[reconcile.Request]time.Time
	// swept is when due was last cleared of requests quiet for a window.
	swept time.Time
}

// NewWindow returns a Window of delay on the real clock. A delay of zero
// or less queues every request at once.
func NewWindow(delay time.Duration) *Window {
	return NewWindowWithClock(delay, clock.RealClock{})
}

// NewWindowWithClock is NewWindow on clk (tests).
func NewWindowWithClock(delay time.Duration, clk clock.PassiveClock) *Window {
	return &Window{delay: delay, clock: clk, due: map[reconcile.Request]time.Time{}}
}

// after returns how long from now req is to wait before it is queued,
// and records that it will be: at once after a quiet window, with the
// add already due if one is, or a window after the last add otherwise.
func (w *Window) after(req reconcile.Request) time.Duration {
	if w.delay <= 0 {
		return 0
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	due, ok := w.due[req]
	switch {
	case !ok || !now.Before(due.Add(w.delay)):
		due = now
	case due.After(now):
		// An add is due: the event joins it.
	default:
		due = due.Add(w.delay)
	}
	w.due[req] = due
	w.sweep(now)
	return due.Sub(now)
}

// sweep forgets, once a window, the requests quiet for a window: their
// next event is queued at once whether they are remembered or not.
func (w *Window) sweep(now time.Time) {
	if now.Sub(w.swept) < w.delay {
		return
	}
	w.swept = now
	for req, due := range w.due {
		if !now.Before(due.Add(w.delay)) {
			delete(w.due, req)
		}
	}
}

// add queues req in its window.
func (w *Window) add(req reconcile.Request, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if after := w.after(req); after > 0 {
		q.AddAfter(req, after)
		return
	}
	q.Add(req)
}

// Enqueue returns an event handler that queues the requests mapFn returns
// for each event in their windows.
func (w *Window) Enqueue(mapFn handler.MapFunc) handler.EventHandler {
	return w.EnqueueLeaving(mapFn, nil)
}

// Leaving maps an update to the requests its old object concerned and its
// new one no longer does, which must hear of it too.
type Leaving func(ctx context.Context, old, updated client.Object) []reconcile.Request

// EnqueueLeaving is Enqueue that, on an update, also queues the requests
// left returns (none when left is nil).
func (w *Window) EnqueueLeaving(mapFn handler.MapFunc, left Leaving) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range mapFn(ctx, o) {
			w.add(req, q)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectNew, q)
			if left != nil {
				for _, req := range left(ctx, e.ObjectOld, e.ObjectNew) {
					w.add(req, q)
				}
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}

// Self maps an object to its own request.
func Self(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}
