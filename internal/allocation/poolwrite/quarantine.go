package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Holder names the former holder of quarantined addresses.
type Holder struct {
	Node string
	// NodeUID is the UID of the Node, from the enactment's owner reference.
	NodeUID types.UID
	// Ref is the holder.
	Ref holder.Ref
	// Captures names, by address, the capture that held it when the
	// address is kept for the holder's return (see
	// ippoolv1.QuarantinedAddress.Capture); nil when it is not.
	Captures map[string]string
	// Interfaces names, by address, the interface it was applied to, for
	// messages.
	Interfaces map[string]string
}

// WithoutReturn returns h with no address kept for its return: the
// quarantine of an address taken by a reset or dropped from a policy hands
// it back to nobody.
func (h Holder) WithoutReturn() Holder {
	h.Captures = nil
	return h
}

// Entry is the quarantine of ip, released by h at since: the node whose
// evidence lifts it (and that Node's UID), the holder, the capture that
// keeps it for the holder's return, the interface it was on.
func (h Holder) Entry(ip string, since metav1.Time) ippoolv1.QuarantinedAddress {
	return ippoolv1.QuarantinedAddress{IP: ip, Node: h.Node, NodeUID: h.NodeUID, Holder: h.Ref.String(),
		Capture: h.Captures[ip], Interface: h.Interfaces[ip], Since: since}
}

// Quarantine keeps addresses from everyone else until the pool controller
// lifts the quarantine on evidence that the holder no longer carries them
// (its network state, published after the release, without them, or its
// Node gone). Call it before the record goes: the controller lifts no
// quarantine while a record claims its address. It is idempotent: an
// address quarantined already keeps its entry. An address is quarantined,
// its bit set, in every pool whose range hands it out: its own pool, or,
// if that pool was deleted, an overlapping one. It writes also on a status
// nobody vouches for (a bitmap emptied by hand), since it only adds
// protection. It returns the addresses it newly quarantined, by pool.
func (w *Writer) Quarantine(ctx context.Context, holder Holder, record ippoolv1.EnactmentIPPools) (ippoolv1.EnactmentIPPools, error) {
	ctx = audit.Default(ctx, "Released", "its holder gives it up; kept from everyone else until its node shows it gone")
	var ips []netip.Addr
	for _, a := range record {
		for _, s := range a.Held() {
			if ip, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, ip)
			}
		}
	}
	if len(ips) == 0 {
		return nil, nil
	}
	out := ippoolv1.EnactmentIPPools{}
	// A pool re-created between the list and its write is listed again:
	// the new incarnation hands the addresses out, so it must hold them;
	// so are the pools of a pass's list that looks behind (errStaleList).
	for attempt := 1; ; attempt++ {
		err := w.quarantineInPools(ctx, holder, ips, out)
		if !errors.Is(err, ErrReplaced) && !errors.Is(err, errStaleList) || attempt == 3 {
			return out, err
		}
		forgetPools(ctx)
	}
}

// quarantineInPools quarantines ips in every pool whose range hands one
// of them out, and adds what it quarantined to out. On a list of the pass
// (OnePoolList) that looks behind, it returns errStaleList after writing
// what it could.
func (w *Writer) quarantineInPools(ctx context.Context, holder Holder, ips []netip.Addr, out ippoolv1.EnactmentIPPools) error {
	pools, reused, err := w.listPools(ctx)
	if err != nil {
		return err
	}
	var errs []error
	covered, gone := map[netip.Addr]bool{}, false
	for i := range pools {
		p := &pools[i]
		mine := inRange(p, ips)
		for _, ip := range mine {
			covered[ip] = true
		}
		q, err := w.quarantineIn(ctx, p, holder, mine)
		switch {
		case errors.Is(err, errPoolGone):
			gone = true // it needs no quarantine; another may hand them out now
		case err != nil:
			errs = append(errs, err)
		}
		if len(q) > 0 {
			out[p.Name] = ippoolv1.PoolAllocation{Allocated: q}
		}
	}
	if reused && (gone || slices.ContainsFunc(ips, func(ip netip.Addr) bool { return !covered[ip] })) {
		errs = append(errs, errStaleList)
	}
	return errors.Join(errs...)
}

// errPoolGone says that a pool was deleted before its quarantine's write.
var errPoolGone = errors.New("the pool is gone")

// quarantineIn adds quarantine entries for ips to one pool incarnation.
// Quarantines of the same pool that callers of this Writer start while one
// is being written go together in the next write (see groups).
func (w *Writer) quarantineIn(ctx context.Context, pool *ippoolv1.NodeIPPool, holder Holder, ips []netip.Addr) ([]string, error) {
	if len(ips) == 0 {
		return nil, nil
	}
	q := &quarantine{holder: holder, ips: ips}
	written, err := w.quarantines.do(ctx, pool, q, w.writeQuarantines)
	if !written {
		return nil, err
	}
	return q.added, err
}

// writeQuarantines adds the entries of qs to one pool incarnation in one
// write, and sets each one's added.
func (w *Writer) writeQuarantines(ctx context.Context, pool *ippoolv1.NodeIPPool, qs []*quarantine) error {
	since := metav1.NewTime(w.Clock.Now().Truncate(time.Second))
	_, err := w.Update(ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		changed := false
		for _, q := range qs {
			q.added = nil
			for _, ip := range q.ips {
				entry := q.holder.Entry(ip.String(), since)
				switch err := alloc.AllocateIP(ip); {
				case err == nil:
					changed = true
				case !errors.Is(err, ippool.ErrAllocated):
					continue
				}
				if poolstatus.AddQuarantine(p, entry) {
					q.added = append(q.added, entry.IP)
					changed = true
				}
			}
		}
		return changed, nil
	}, Incarnation(pool.UID), protective())
	if apierrors.IsNotFound(err) || errors.Is(err, ippool.ErrInvalidRange) {
		// The pool is gone, or hands out nothing: it needs no quarantine.
		for _, q := range qs {
			q.added = nil
		}
		if apierrors.IsNotFound(err) {
			return errPoolGone
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("quarantine in NodeIPPool %q: %w", pool.Name, err)
	}
	return nil
}
