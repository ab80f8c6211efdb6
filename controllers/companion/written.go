package companion

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// What this process wrote of the generated policies (Reconciler.written),
// until its cache shows it: a pass that starts before then must neither
// count the node as idle nor write it again.

// writtenAt is what this process last wrote of a generated policy: the
// incarnation (UID) and the generation the API server gave it, and when
// it wrote it or last confirmed it on the API server (at).
type writtenAt struct {
	uid        types.UID
	generation int64
	at         time.Time
}

// writtenConfirm is how long a write the cache has not shown is waited
// for before the API server is asked whether the policy is still there:
// its deletion event never comes if it went while the watch was down
// (the relist does not tell what it missed), or before the write was
// noted.
const writtenConfirm = 10 * time.Second

// stale reports whether this process wrote the generated policy name at
// an incarnation and generation the cache has not shown yet (have: the
// cache's, or nil). A cache that still shows an earlier incarnation of
// the name has not shown the write, whatever its generation. A write
// not shown for writtenConfirm is forgotten if the API server no longer
// holds that incarnation.
func (r *Reconciler) stale(ctx context.Context, name string, have *metav1.PartialObjectMetadata) bool {
	v, ok := r.written.Load(name)
	if !ok {
		return false
	}
	w := v.(writtenAt)
	now := r.Clock.Now()
	switch {
	case have != nil && have.UID == w.uid && have.Generation >= w.generation:
	case now.Sub(w.at) < writtenConfirm:
		return true
	case r.incarnationGone(ctx, name, w.uid):
		ctrl.LoggerFrom(ctx).Info("a policy this process wrote is gone from the API server; its deletion was not seen", "policy", name)
		r.reads.forgetIncarnation(name, w.uid)
	default:
		w.at = now
		r.written.CompareAndSwap(name, v, w)
		return true
	}
	r.written.CompareAndDelete(name, v)
	return false
}

// incarnationGone reports whether the API server holds no policy name of
// the incarnation uid. A read that fails says it is there.
func (r *Reconciler) incarnationGone(ctx context.Context, name string, uid types.UID) bool {
	m, err := r.onServer(ctx, name)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("could not read whether a written policy is still there", "error", err.Error())
		return false
	}
	return m == nil || m.UID != uid
}

// forgetWritten drops this process's write of the policy name if it is
// of the incarnation uid.
func (r *Reconciler) forgetWritten(name string, uid types.UID) {
	if v, ok := r.written.Load(name); ok && v.(writtenAt).uid == uid {
		r.written.CompareAndDelete(name, v)
	}
}
