package handler

import (
	"errors"
	"net/netip"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/enactmentrecord"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// poolPlan is what one pool must do for one enactment: the captures whose
// recorded address is reused, the offsets of those whose bit is not set,
// and the captures that need a new address.
type poolPlan struct {
	pool      string
	addresses map[string]capture.Address
	unsetBits []uint64
	fresh     []string
	// moved describes recorded addresses the range no longer hands out.
	moved []string
	// notes describe the fresh addresses that came back, or were kept for
	// another node's return (assign.Notes).
	notes assign.Notes
	// source is the pool the plan was made on.
	source *ippoolv1.NodeIPPool
	// unconfirmed names the fresh captures whose node carries an address
	// that only every holder's records can tell is the node's
	// (assign.Taken.Unconfirmed): a self-allocating handler asks the pool
	// controller instead of writing the plan, or of reporting the pool
	// full.
	unconfirmed []string
}

// needsWrite reports whether the pool's status must change.
func (p *poolPlan) needsWrite() bool { return len(p.unsetBits) > 0 || len(p.fresh) > 0 }

// planPool decides, without side effects, how the captures refs of one pool
// are served from alloc. A recorded address is reused when the range still
// hands it out and no other capture of the same plan already took it.
func planPool(e *nncev1beta1.NodeNetworkConfigurationEnactment, pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator, refs []capture.Ref) *poolPlan {
	p := &poolPlan{addresses: map[string]capture.Address{}, source: pool}
	taken := map[netip.Addr]bool{}
	rng := alloc.Range()
	for _, ref := range refs {
		p.pool = ref.Pool
		addr, ok := enactmentrecord.Of(e, ref)
		if !ok || taken[addr.IP] {
			p.fresh = append(p.fresh, ref.Capture)
			continue
		}
		if why := poolstatus.Outside(ref.Pool, rng, ref.Capture, addr.IP); why != "" {
			p.fresh = append(p.fresh, ref.Capture)
			p.moved = append(p.moved, why)
			continue
		}
		off, _ := rng.Offset(addr.IP) // the range hands it out: it has an offset
		taken[addr.IP] = true
		p.addresses[ref.Capture] = poolstatus.Address(pool, rng, addr.IP)
		if !alloc.Has(off) {
			p.unsetBits = append(p.unsetBits, off)
		}
	}
	return p
}

// errExhausted carries what an admin needs when a pool is full.
type errExhausted struct {
	pool string
	size uint64
	want int
}

func (e *errExhausted) Error() string {
	return poolstatus.ExhaustedMessage(e.pool, e.size, e.want)
}

// apply carries the plan out on alloc, a fresh copy of the plan's pool:
// it sets the reused bits and takes addresses for the fresh captures, all
// or none, with their in-flight entries under token (assign.Chooser.TakeAll:
// a return from quarantine, a reservation, else the lowest free address).
// It resumes no entry (assign.Resumable): an enactment's entries may be
// another writer's, and planWrite has refused a pool that may not hand
// out addresses (poolstatus.Unservable) before.
// On error alloc and the pool may be half-changed; callers discard them.
func (p *poolPlan) apply(alloc *ippool.Allocator, asker assign.Asker, token string, since metav1.Time) error {
	for _, off := range p.unsetBits {
		if err := alloc.Allocate(off); err != nil && !errors.Is(err, ippool.ErrAllocated) {
			return err
		}
	}
	rng := alloc.Range()
	chooser := assign.New(p.source, alloc)
	defer chooser.Done()
	taken, got, err := chooser.TakeAll(assign.Ask{Asker: asker, Captures: p.fresh, Token: token}, since)
	if full := (*assign.FullError)(nil); errors.As(err, &full) && full.Unconfirmed {
		p.unconfirmed = append(p.unconfirmed, p.fresh[got])
	}
	if errors.Is(err, ippool.ErrFull) {
		return &errExhausted{pool: p.pool, size: rng.Size(), want: len(p.fresh) - got}
	}
	if err != nil {
		return err
	}
	for i, name := range p.fresh {
		p.addresses[name] = poolstatus.Address(p.source, rng, taken[i].IP)
		p.notes.Add(taken[i], name)
		if taken[i].Unconfirmed() {
			p.unconfirmed = append(p.unconfirmed, name)
		}
	}
	return nil
}

// writeRecord writes the addresses into the enactment: status.ippool by pool and
// status.capturedStates by capture, keeping the metadata of captured states
// that did not change so a repeated record writes nothing new. An address
// the enactment held that no capture uses any more (a dropped capture, a
// capture moved to another pool, a replaced address) is left releasing,
// for the pool controller to take back (enactmentrecord.Set).
func writeRecord(e *nncev1beta1.NodeNetworkConfigurationEnactment, captures capture.Captures, addresses map[string]capture.Address,
	states map[string][]byte, meta shared.NodeNetworkConfigurationEnactmentMetaInfo) {
	pools := ippoolv1.EnactmentIPPools{}
	for _, ref := range captures.Refs {
		addr, ok := addresses[ref.Capture]
		if !ok {
			continue
		}
		a := pools[ref.Pool]
		a.Allocated = append(a.Allocated, addr.IP.String())
		pools[ref.Pool] = a
	}
	enactmentrecord.Set(e, pools)
	captured := map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{}
	for name, state := range states {
		old, ok := e.Status.CapturedStates[name]
		if ok && sameState(old.State.Raw, state) {
			captured[name] = old
			continue
		}
		captured[name] = shared.NodeNetworkConfigurationEnactmentCapturedState{State: shared.NewState(string(state)), MetaInfo: meta}
	}
	if len(captured) == 0 {
		captured = nil
	}
	e.Status.CapturedStates = captured
}
