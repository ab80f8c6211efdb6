package poolwrite

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// ReleaseConfirmed is the StateSeenAtRelease of a quarantine whose release
// a handler confirmed applied (ConfirmRelease): any network state of the
// holder's node, whenever published, is evidence.
var ReleaseConfirmed = metav1.NewTime(time.Unix(0, 0).UTC())

// ConfirmRelease records, on the quarantines of holder's addresses of
// record, that their removal from the holder's network was applied and
// verified by a handler that does not publish a state when nothing
// changed (kubernetes-nmstate's, under companion mode's pooled policies:
// its enactment of a policy without them is Available). Their
// StateSeenAtRelease becomes ReleaseConfirmed: once the record is gone,
// the holder's NodeNetworkState without them lifts them, however old;
// one that still shows them keeps them. Call it before the record goes,
// and only on a confirmed apply: an unconfirmed release leaves the pool
// controller to ask for a state published after it. Entries stamped
// already are left alone; pools that are gone need nothing.
func (w *Writer) ConfirmRelease(ctx context.Context, holder Holder, record ippoolv1.EnactmentIPPools) error {
	ips := map[string]bool{}
	for _, a := range record {
		for _, s := range a.Held() {
			ips[s] = true
		}
	}
	if len(ips) == 0 {
		return nil
	}
	pools, reused, err := w.listPools(ctx)
	if err != nil {
		return err
	}
	var addrs []netip.Addr
	for s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			addrs = append(addrs, ip)
		}
	}
	unconfirmed := func(q ippoolv1.QuarantinedAddress) bool {
		return ips[q.IP] && q.HolderName() == holder.Ref.String() && q.StateSeenAtRelease == nil
	}
	for i := range pools {
		// A list shared by a pass (OnePoolList) may predate the
		// quarantine: then a pool whose range holds one of the addresses
		// is looked at too, and the write decides on its latest copy.
		if !slices.ContainsFunc(pools[i].Status.Quarantined, unconfirmed) && (!reused || len(inRange(&pools[i], addrs)) == 0) {
			continue
		}
		_, err := w.Update(ctx, pools[i].Name, func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) (bool, error) {
			changed := false
			for j := range p.Status.Quarantined {
				if q := &p.Status.Quarantined[j]; unconfirmed(*q) {
					q.StateSeenAtRelease = ReleaseConfirmed.DeepCopy()
					changed = true
				}
			}
			return changed, nil
		}, Incarnation(pools[i].UID), protective())
		if err != nil && !ignorable(err) {
			return fmt.Errorf("confirm the release of %s in NodeIPPool %q: %w", holder.Ref.Title(), pools[i].Name, err)
		}
	}
	return nil
}

// inRange returns those of ips that the pool's range hands out: none for
// a range that hands out nothing.
func inRange(p *ippoolv1.NodeIPPool, ips []netip.Addr) []netip.Addr {
	rng, err := poolstatus.Range(p)
	if err != nil {
		return nil
	}
	var mine []netip.Addr
	for _, ip := range ips {
		if _, err := rng.Assignable(ip); err == nil {
			mine = append(mine, ip)
		}
	}
	return mine
}
