package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/backoff"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/eventnote"
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

	quarantines groups[*quarantine]
	together    groups[*member]
	recorded    recordedEntries
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
// the API server, writes with the manager's client under the field
// manager component (a pool's managedFields name who wrote each part of
// its status), and keeps the audit trail with an Event on each change's
// holder, recorded as component.
func ForManager(mgr manager.Manager, clk clock.Clock, component string) *Writer {
	w := NewWriter(mgr.GetAPIReader(), client.WithFieldOwner(mgr.GetClient(), component), clk)
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
		pruned := w.recorded.prune(pool, unreadable == nil && (vouched || o.vouch))
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
		w.recorded.forget(pool, w.Clock.Now())
		if w.Audit != nil {
			actx := audit.AddNotes(ctx, pruned)
			w.Audit(actx, audit.Changes(actx, name, alloc.Range(), was, &pool.Status, restored, alloc, w.Clock.Now()))
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
