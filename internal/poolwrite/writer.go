package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/eventnote"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// ErrRetriesExhausted is returned when every attempt of a write met a
// conflict; callers requeue.
var ErrRetriesExhausted = errors.New("the object kept changing under us")

// ErrUnreadable wraps the error of a pool whose status.allocatedOffsets
// cannot be decoded for its range. Only a rebuild can repair such a pool.
var ErrUnreadable = errors.New("unreadable status.allocatedOffsets")

// ErrUnvouched is returned when a write would build on a status that does
// not carry its stamp (a hand edit, a status from another pool). Only a
// rebuild by the pool controller, which vouches anew, may write it.
var ErrUnvouched = errors.New("status.allocatedOffsets does not match its stamp")

// ErrReplaced is returned when the pool was deleted and re-created since
// the caller looked at it (its UID changed).
var ErrReplaced = errors.New("the pool was re-created")

// Gone reports whether a pool write failed because the pool it was meant
// for is no more: deleted (NotFound), or re-created since the caller
// looked at it (ErrReplaced). Every holder then asks again, of the pool
// that is there now.
func Gone(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, ErrReplaced)
}

// Writer is the one writer of NodeIPPool statuses. Set every field but
// OnWrite, OnConflict and Audit.
type Writer struct {
	// Reader reads from the API server, never from an informer's cache:
	// every write is decided on the latest copy (but for the first read of
	// an Update with FromWatchCache).
	Reader client.Reader
	// Client writes to the API server.
	Client client.Client
	// Backoff paces retries after conflicts.
	Backoff *backoff.Jittered
	// Clock stamps in-flight and quarantine entries and waits between
	// retries.
	Clock clock.Clock
	// OnWrite, if set, is called before every pool status write;
	// OnConflict for every one refused because another writer changed the
	// pool first.
	OnWrite, OnConflict func(pool string)
	// Audit, if set, is told the changes of holdings every successful
	// write made (audit.Changes). NewWriter sets it to log them;
	// ForManager also records Events on their holders.
	Audit func(ctx context.Context, changes []audit.Change)

	quarantines groups
}

// DefaultBackoff returns 10 attempts from 20ms up to 2s, seeded randomly.
func DefaultBackoff() *backoff.Jittered {
	return &backoff.Jittered{Backoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 2 * time.Second, Steps: 10},
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// NewWriter returns a Writer reading through reader, writing through c,
// with the default backoff.
func NewWriter(reader client.Reader, c client.Client, clk clock.Clock) *Writer {
	return &Writer{Reader: reader, Client: c, Backoff: DefaultBackoff(), Clock: clk, Audit: audit.Trail{}.Record}
}

// ForManager returns the Writer of a component run by mgr: it reads from
// the API server, writes with the manager's client, and keeps the audit
// trail with an Event on each change's holder, recorded as component.
func ForManager(mgr manager.Manager, clk clock.Clock, component string) *Writer {
	w := NewWriter(mgr.GetAPIReader(), mgr.GetClient(), clk)
	w.Audit = audit.Trail{Events: eventnote.New(mgr.GetEventRecorder(component))}.Record
	return w
}

// Mutation changes a pool read from the API server: its bitmap through
// alloc (Update writes the snapshot, counts and stamp back), its in-flight
// and quarantine entries, and its conditions. It returns whether anything
// changed; a Mutation that returns false ends Update without a write. It
// may be called several times, once per attempt, each time with a fresh
// copy, and must not keep state that a later attempt would misread.
type Mutation func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error)

// Option tunes an Update.
type Option func(*updateOptions)

type updateOptions struct {
	uid        types.UID
	vouch      bool
	protective bool
	watchCache bool
	discard    func(error)
}

// FromWatchCache lets the first read come from the API server's watch
// cache (resourceVersion "0") instead of etcd: cheaper for the API server,
// and enough for a caller that mostly decides not to write. A stale copy
// costs at most a conflict; every later attempt reads the latest copy.
func FromWatchCache() Option {
	return func(o *updateOptions) { o.watchCache = true }
}

// protective lets Update write a status whose stamp does not match (or
// whose bitmap cannot be read), for a Mutation that only sets bits and adds
// entries: it can only keep addresses from being handed out. The stamp is
// left as it was, so the status stays unvouched and the pool controller
// still rebuilds it; that rebuild keeps the entries.
func protective() Option {
	return func(o *updateOptions) { o.protective = true }
}

// Incarnation fences the write to the pool with this UID: if the pool was
// deleted and re-created, Update fails with ErrReplaced.
func Incarnation(uid types.UID) Option {
	return func(o *updateOptions) { o.uid = uid }
}

// Vouch lets Update write a status whose stamp does not match, and stamp
// the result: only the pool controller's rebuild, which sets every claimed
// bit again, may use it. A bitmap that cannot be decoded is replaced by an
// empty one after report is told why.
func Vouch(report func(error)) Option {
	return func(o *updateOptions) { o.vouch, o.discard = true, report }
}

// Update applies mutate to the pool named name and writes the result under
// the resourceVersion it read, retrying on conflicts. It returns how many
// writes it attempted. Unless Vouch is given, it writes only on a status
// that carries its stamp. Errors: the pool's NotFound error (test with
// apierrors.IsNotFound), an error wrapping ippool.ErrInvalidRange for a range
// that cannot hand out addresses, ErrReplaced, ErrUnreadable, ErrUnvouched,
// mutate's own error, ErrRetriesExhausted, or the context's.
func (w *Writer) Update(ctx context.Context, name string, mutate Mutation, opts ...Option) (int, error) {
	var o updateOptions
	for _, opt := range opts {
		opt(&o)
	}
	attempts := 0
	cached := o.watchCache
	err := w.Retry(ctx, func() error {
		pool, alloc, err := w.read(ctx, name, o, cached)
		cached = false
		if err != nil {
			return err
		}
		unreadable := alloc.Restore(pool.Status.AllocatedOffsets)
		if unreadable != nil && o.discard != nil {
			o.discard(unreadable)
		}
		vouched := poolstatus.Vouched(pool)
		before, restored := poolstatus.Stamp(pool), alloc.Clone()
		var was *ippoolv1.NodeIPPoolStatus
		if w.Audit != nil {
			was = pool.Status.DeepCopy()
		}
		changed, err := mutate(pool, alloc)
		if err != nil || !changed {
			return err
		}
		if o.vouch || !alloc.Equal(restored) {
			pool.Status.AllocatedOffsets = alloc.Snapshot()
		}
		poolstatus.SetCounts(pool, alloc)
		pool.Status.MirrorHolders()
		switch after := poolstatus.Stamp(pool); {
		case o.vouch:
			pool.Status.Stamp = after
		case after == before:
			// Conditions or counts only: the stamp stays as it was.
		case o.protective && (unreadable != nil || !vouched):
			// Protection added to a status nobody vouches for: it stays
			// unvouched, for the rebuild.
		case unreadable != nil:
			return fmt.Errorf("NodeIPPool %q: %w: %w", name, ErrUnreadable, unreadable)
		case !vouched:
			return fmt.Errorf("NodeIPPool %q: %w; the pool controller must rebuild it", name, ErrUnvouched)
		default:
			pool.Status.Stamp = after
		}
		attempts++
		err = w.write(ctx, pool)
		if err != nil {
			return fmt.Errorf("write NodeIPPool %q: %w", name, err)
		}
		if w.Audit != nil {
			w.Audit(ctx, audit.Changes(ctx, name, alloc.Range(), was, &pool.Status, restored, alloc, w.Clock.Now()))
		}
		return nil
	})
	return attempts, err
}

// UpdateConditions applies change to the pool named name, which may change
// its conditions and observedGeneration only, and writes it under the
// resourceVersion it read, retrying on conflicts. It never reads or changes
// the allocation state, so it also writes on a pool whose range or bitmap
// cannot be used (to say so). It returns the pool as written, or nil if
// change asked for no write. Errors are those of Update.
func (w *Writer) UpdateConditions(ctx context.Context, name string, change func(*ippoolv1.NodeIPPool) bool,
	opts ...Option) (*ippoolv1.NodeIPPool, error) {
	var o updateOptions
	for _, opt := range opts {
		opt(&o)
	}
	var written *ippoolv1.NodeIPPool
	err := w.Retry(ctx, func() error {
		written = nil
		var pool ippoolv1.NodeIPPool
		if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &pool); err != nil {
			return fmt.Errorf("get NodeIPPool %q: %w", name, err)
		}
		if o.uid != "" && pool.UID != o.uid {
			return fmt.Errorf("NodeIPPool %q: %w (UID %s, not %s)", name, ErrReplaced, pool.UID, o.uid)
		}
		if !change(&pool) {
			return nil
		}
		if err := w.write(ctx, &pool); err != nil {
			return fmt.Errorf("write the conditions of NodeIPPool %q: %w", name, err)
		}
		written = &pool
		return nil
	})
	return written, err
}

// write writes pool's status, and tells OnWrite and OnConflict.
func (w *Writer) write(ctx context.Context, pool *ippoolv1.NodeIPPool) error {
	if w.OnWrite != nil {
		w.OnWrite(pool.Name)
	}
	err := w.Client.Status().Update(ctx, pool)
	if apierrors.IsConflict(err) && w.OnConflict != nil {
		w.OnConflict(pool.Name)
	}
	return err
}

// Retry calls write until it returns anything but a conflict, waiting
// with the backoff between attempts, at most Backoff.Steps times; then it
// fails with ErrRetriesExhausted. It is the one retry loop of every
// resourceVersion-guarded write here.
func (w *Writer) Retry(ctx context.Context, write func() error) error {
	for attempt := 1; ; attempt++ {
		err := write()
		if !apierrors.IsConflict(err) {
			return err
		}
		if attempt >= w.Backoff.Steps {
			return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, attempt, err)
		}
		if err := w.sleep(ctx, w.Backoff.Delay(attempt)); err != nil {
			return err
		}
	}
}

// read returns the pool and an empty allocator over its range. The caller
// restores the bitmap: one that cannot be decoded leaves the allocator
// empty, and then the caller may write conditions, but only a Vouch write
// may change the allocation state.
func (w *Writer) read(ctx context.Context, name string, o updateOptions, cached bool) (*ippoolv1.NodeIPPool, *ippool.Allocator, error) {
	var pool ippoolv1.NodeIPPool
	var opts []client.GetOption
	if cached {
		opts = append(opts, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	}
	if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &pool, opts...); err != nil {
		return nil, nil, fmt.Errorf("get NodeIPPool %q: %w", name, err)
	}
	if o.uid != "" && pool.UID != o.uid {
		return nil, nil, fmt.Errorf("NodeIPPool %q: %w (UID %s, not %s)", name, ErrReplaced, pool.UID, o.uid)
	}
	rng, err := poolstatus.Range(&pool)
	if err != nil {
		return nil, nil, fmt.Errorf("NodeIPPool %q: %w", name, err)
	}
	return &pool, ippool.NewAllocator(rng), nil
}

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
	// the new incarnation hands the addresses out, so it must hold them.
	for attempt := 1; ; attempt++ {
		err := w.quarantineInPools(ctx, holder, ips, out)
		if !errors.Is(err, ErrReplaced) || attempt == 3 {
			return out, err
		}
	}
}

// quarantineInPools quarantines ips in every pool whose range hands one
// of them out, and adds what it quarantined to out.
func (w *Writer) quarantineInPools(ctx context.Context, holder Holder, ips []netip.Addr, out ippoolv1.EnactmentIPPools) error {
	var pools ippoolv1.NodeIPPoolList
	if err := w.Reader.List(ctx, &pools); err != nil {
		return fmt.Errorf("list pools: %w", err)
	}
	var errs []error
	for i := range pools.Items {
		p := &pools.Items[i]
		rng, err := poolstatus.Range(p)
		if err != nil {
			continue // a range that hands out nothing
		}
		var mine []netip.Addr
		for _, ip := range ips {
			if _, err := rng.Assignable(ip); err == nil {
				mine = append(mine, ip)
			}
		}
		q, err := w.quarantineIn(ctx, p, holder, mine)
		if err != nil {
			errs = append(errs, err)
		}
		if len(q) > 0 {
			out[p.Name] = ippoolv1.PoolAllocation{Allocated: q}
		}
	}
	return errors.Join(errs...)
}

// quarantineIn adds quarantine entries for ips to one pool incarnation.
// Quarantines of the same pool that callers of this Writer start while one
// is being written go together in the next write (see groups).
func (w *Writer) quarantineIn(ctx context.Context, pool *ippoolv1.NodeIPPool, holder Holder, ips []netip.Addr) ([]string, error) {
	if len(ips) == 0 {
		return nil, nil
	}
	return w.quarantines.do(ctx, pool, &quarantine{holder: holder, ips: ips}, w.writeQuarantines)
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
				entry := ippoolv1.QuarantinedAddress{IP: ip.String(), Node: q.holder.Node, NodeUID: q.holder.NodeUID,
					Holder: q.holder.Ref.String(), Capture: q.holder.Captures[ip.String()],
					Interface: q.holder.Interfaces[ip.String()], Since: since}
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
		return nil
	}
	if err != nil {
		return fmt.Errorf("quarantine in NodeIPPool %q: %w", pool.Name, err)
	}
	return nil
}

// ignorable tells the errors after which a give-back needs nothing: the
// pool is gone or re-created, or only a rebuild can touch it.
func ignorable(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, ErrReplaced) || errors.Is(err, ippool.ErrInvalidRange) ||
		errors.Is(err, ErrUnreadable) || errors.Is(err, ErrUnvouched)
}

func (w *Writer) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.Clock.After(d):
		return nil
	}
}
