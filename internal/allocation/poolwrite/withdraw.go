package poolwrite

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Withdraw gives back addresses taken for one holder (holderName: an
// enactment's name, or any holder's) whose record will not be written:
// WithdrawTaken of every address in ips.
func (w *Writer) Withdraw(ctx context.Context, pool, holderName, token string, ips []string, opts ...Option) ([]string, error) {
	taken := make(map[string]string, len(ips))
	for _, ip := range ips {
		taken[ip] = holderName
	}
	return w.WithdrawTaken(ctx, pool, token, taken, opts...)
}

// WithdrawTaken gives back addresses taken in one pass, under token, for
// holders whose records will not be written (their write was refused):
// taken names, by address, the holder it was taken for. In one pool
// write it clears the bit of each address whose in-flight entry still
// names that holder and token, and removes the entry; a quarantined
// address keeps its bit and its entry (someone recorded it and released
// it since). An address whose entry is gone was revoked by the pool controller (and may be someone
// else's by now) and is left alone, so a withdrawal never clears a bit it
// does not own, in this pool incarnation or a later one. It returns the
// addresses it cleared. A pool that is gone, unreadable or unvouched needs
// nothing: the pool controller's rebuild and garbage collection deal with
// the entries. Give Incarnation with the UID of the pool the addresses were
// taken from: a pool re-created since is left alone.
func (w *Writer) WithdrawTaken(ctx context.Context, pool, token string, taken map[string]string, opts ...Option) ([]string, error) {
	if len(taken) == 0 {
		return nil, nil
	}
	ctx = audit.Default(ctx, "Withdrawn", "its holder's record of it was not written")
	var withdrawn []string
	_, err := w.Update(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		withdrawn = nil
		for _, s := range slices.Sorted(maps.Keys(taken)) {
			e := poolstatus.InFlightOf(p, s)
			ip, perr := netip.ParseAddr(s)
			if e == nil || e.HolderName() != taken[s] || e.Token != token || perr != nil || poolstatus.QuarantineOf(p, s) != nil {
				// Not this pass's, or quarantined since: recorded by
				// someone, and released; the quarantine owns the bit.
				continue
			}
			if poolstatus.Unrecorded(p, s) {
				_ = alloc.ReleaseIP(ip) // outside the range after a hand edit: nothing to clear
			}
			withdrawn = append(withdrawn, s)
		}
		return len(withdrawn) > 0, nil
	}, opts...)
	if ignorable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("withdraw %v: %w", slices.Sorted(maps.Keys(taken)), err)
	}
	return withdrawn, nil
}
