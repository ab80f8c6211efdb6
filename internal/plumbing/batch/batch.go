// Package batch queues the requests of watch events after a delay, so that
// the events of one window join one reconcile: the workqueue keeps a
// request once however often it is added while it waits. A controller
// whose reconcile costs O(objects) and whose events come from every node
// then does O(objects) work per window instead of per event.
package batch

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultDelay is the window of the controllers' batched watches.
const DefaultDelay = 200 * time.Millisecond

// EnqueueAfter returns an event handler that queues the requests mapFn
// returns for each event after delay.
func EnqueueAfter(delay time.Duration, mapFn handler.MapFunc) handler.EventHandler {
	return EnqueueAfterLeaving(delay, mapFn, nil)
}

// Leaving maps an update to the requests its old object concerned and its
// new one no longer does, which must hear of it too.
type Leaving func(ctx context.Context, old, updated client.Object) []reconcile.Request

// EnqueueAfterLeaving is EnqueueAfter that, on an update, also queues the
// requests left returns (none when left is nil).
func EnqueueAfterLeaving(delay time.Duration, mapFn handler.MapFunc, left Leaving) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range mapFn(ctx, o) {
			q.AddAfter(req, delay)
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
					q.AddAfter(req, delay)
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
