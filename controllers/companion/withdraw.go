package companion

import (
	"context"
	"maps"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
)

// takenFrom is what a pass took from one pool incarnation: by address, the
// holder it was taken for.
type takenFrom struct {
	uid     types.UID
	holders map[string]string
}

// took notes what a pool write took, for a withdrawal if its record is
// refused.
func (w *world) took(pool *ippoolv1.NodeIPPool, got map[need]netip.Addr) {
	if len(got) == 0 {
		return
	}
	if w.taken == nil {
		w.taken = map[string]takenFrom{}
	}
	t, ok := w.taken[pool.Name]
	if !ok || t.uid != pool.UID {
		t = takenFrom{uid: pool.UID, holders: map[string]string{}}
	}
	for nd, ip := range got {
		h, _ := holderOf(w.policy, nd.node)
		t.holders[ip.String()] = h.String()
	}
	w.taken[pool.Name] = t
}

// writeRecord writes next's status, the record of what the pass took
// (writeStatus); a write certainly not done (refused: the policy changed
// or went since it was read) gives back what the pass took now, not after
// the pool controller's revocation and collection.
func (r *Reconciler) writeRecord(ctx context.Context, w *world, p, next *ippoolv1.PooledNodeNetworkConfigurationPolicy, problems []problem, pl plan) error {
	err := r.writeStatus(ctx, w, p, next, problems, pl)
	switch {
	case err == nil:
		r.recorded(w, next)
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		r.withdraw(ctx, w)
	}
	return err
}

// recorded tells the pool writer which addresses this pass took that
// next, as written, records: their in-flight entries go with the pool's
// next write (poolwrite.Writer.Recorded).
func (r *Reconciler) recorded(w *world, next *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
	if len(w.taken) == 0 {
		return
	}
	held := map[string]bool{}
	for _, n := range next.Status.Nodes {
		for _, a := range n.Held() {
			held[a.IP] = true
		}
	}
	_, token := holderOf(w.policy, "")
	for _, t := range w.taken {
		for ip, h := range t.holders {
			if held[ip] {
				r.Pools.Recorded(t.uid, ip, h, token, holder.PooledPolicyKind+" "+next.Name+" records it")
			}
		}
	}
}

// withdraw gives back the addresses this pass took whose record was
// refused (poolwrite.Writer.WithdrawTaken): only those whose in-flight
// entries still name their holder under this pass's token, and that the
// policy, read again from the API server, does not record. Another pass
// under the same token (a leader that took over from this one, or a write
// that landed late) may have resumed an entry and recorded it: that write
// is what refused this one, so the policy read after the refusal shows
// it. A failed read or pool write leaves the entries to the pool
// controller, which revokes them after the grace period.
func (r *Reconciler) withdraw(ctx context.Context, w *world) {
	if len(w.taken) == 0 {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	recorded := map[string]bool{}
	var now ippoolv1.PooledNodeNetworkConfigurationPolicy
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(w.policy), &now); {
	case apierrors.IsNotFound(err):
	case err != nil:
		log.Error(err, "could not read the policy to give back unrecorded addresses; the pool controller will revoke them")
		return
	default:
		for _, n := range now.Status.Nodes {
			for _, a := range n.Held() {
				recorded[a.IP] = true
			}
		}
	}
	_, token := holderOf(w.policy, "")
	for pool, t := range w.taken {
		holders := maps.Clone(t.holders)
		maps.DeleteFunc(holders, func(ip, _ string) bool { return recorded[ip] })
		withdrawn, err := r.Pools.WithdrawTaken(ctx, pool, token, holders, poolwrite.Incarnation(t.uid))
		if err != nil {
			log.Error(err, "could not give back unrecorded addresses; the pool controller will revoke them", "pool", pool)
			continue
		}
		if len(withdrawn) > 0 {
			log.Info("gave back addresses whose record was refused", "pool", pool, "ips", withdrawn)
		}
	}
}
