package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// ErrRetriesExhausted is returned when every attempt of a write met a
// conflict; callers requeue.
var ErrRetriesExhausted = errors.New("the object kept changing under us")

// ErrUnreadable wraps the error of a pool whose status.allocatedOffsets
// cannot be decoded for its range. Only a rebuild can repair such a pool.
var ErrUnreadable = errors.New("unreadable status.allocatedOffsets")

// Writer writes pool statuses and enactment records. Set every field but
// OnConflict.
type Writer struct {
	// Reader reads from the API server, never from a cache: every write is
	// decided on the latest copy.
	Reader client.Reader
	// Client writes to the API server.
	Client client.Client
	// Backoff paces retries after conflicts.
	Backoff *Backoff
	// Clock waits between retries.
	Clock clock.Clock
	// OnConflict, if set, is called for every pool write refused because
	// another writer changed the pool first.
	OnConflict func(pool string)
}

// NewWriter returns a Writer reading through reader, writing through c,
// with the default backoff.
func NewWriter(reader client.Reader, c client.Client, clk clock.Clock) *Writer {
	return &Writer{Reader: reader, Client: c, Backoff: DefaultBackoff(), Clock: clk}
}

// Mutation changes a pool read from the API server: its status through
// alloc (Update writes the snapshot and counts back) and, if it likes, its
// conditions. It returns whether anything changed; a Mutation that returns
// false ends Update without a write. It may be called several times, once
// per attempt, each time with a fresh copy, and must not keep state that a
// later attempt would misread.
type Mutation func(pool *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error)

// Option tunes an Update.
type Option func(*updateOptions)

type updateOptions struct {
	onUnreadable func(error)
}

// DiscardUnreadable makes Update pass an empty allocator to the Mutation
// when the pool's bitmap cannot be decoded, after telling report why. Only
// a rebuild, which sets every claimed bit again, may use it.
func DiscardUnreadable(report func(error)) Option {
	return func(o *updateOptions) { o.onUnreadable = report }
}

// Update applies mutate to the pool named name and writes the result under
// the resourceVersion it read, retrying on conflicts. It returns how many
// writes it attempted. Errors: the pool's NotFound error (test with
// apierrors.IsNotFound), an error wrapping ippool.ErrInvalidRange for a range
// that cannot hand out addresses, ErrUnreadable, mutate's own error,
// ErrRetriesExhausted, or the context's.
func (w *Writer) Update(ctx context.Context, name string, mutate Mutation, opts ...Option) (int, error) {
	var o updateOptions
	for _, opt := range opts {
		opt(&o)
	}
	for attempt := 1; ; attempt++ {
		pool, alloc, err := w.read(ctx, name, o)
		if err != nil {
			return attempt - 1, err
		}
		changed, err := mutate(pool, alloc)
		if err != nil || !changed {
			return attempt - 1, err
		}
		poolstatus.Set(pool, alloc)
		err = w.Client.Status().Update(ctx, pool)
		if err == nil {
			return attempt, nil
		}
		if !apierrors.IsConflict(err) {
			return attempt, fmt.Errorf("write NodeIPPool %q: %w", name, err)
		}
		if w.OnConflict != nil {
			w.OnConflict(name)
		}
		if attempt >= w.Backoff.Steps {
			return attempt, fmt.Errorf("write NodeIPPool %q after %d attempts: %w", name, attempt, ErrRetriesExhausted)
		}
		if err := w.sleep(ctx, w.Backoff.Delay(attempt)); err != nil {
			return attempt, err
		}
	}
}

// read returns the pool and its restored allocator.
func (w *Writer) read(ctx context.Context, name string, o updateOptions) (*ippoolv1.NodeIPPool, *ippool.Allocator, error) {
	var pool ippoolv1.NodeIPPool
	if err := w.Reader.Get(ctx, types.NamespacedName{Name: name}, &pool); err != nil {
		return nil, nil, fmt.Errorf("get NodeIPPool %q: %w", name, err)
	}
	rng, err := poolstatus.Range(&pool)
	if err != nil {
		return nil, nil, fmt.Errorf("NodeIPPool %q: %w", name, err)
	}
	alloc := ippool.NewAllocator(rng)
	if err := alloc.Restore(pool.Status.AllocatedOffsets); err != nil {
		if o.onUnreadable == nil {
			return nil, nil, fmt.Errorf("NodeIPPool %q: %w: %w", name, ErrUnreadable, err)
		}
		o.onUnreadable(err)
	}
	return &pool, alloc, nil
}

// Release clears the bits of ips in the pool and returns the addresses it
// cleared. Call it only for addresses no enactment records any more (see the
// package comment). Addresses the pool does not hand out, unparseable ones,
// a pool that is gone and a pool whose bitmap is unreadable need nothing.
func (w *Writer) Release(ctx context.Context, pool string, ips []string) ([]string, error) {
	if len(ips) == 0 {
		return nil, nil
	}
	var released []string
	_, err := w.Update(ctx, pool, func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		released = clearBits(alloc, ips)
		return len(released) > 0, nil
	})
	switch {
	case apierrors.IsNotFound(err), errors.Is(err, ippool.ErrInvalidRange), errors.Is(err, ErrUnreadable):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("release %v: %w", ips, err)
	}
	return released, nil
}

// clearBits releases the set bits of ips and returns their addresses.
func clearBits(alloc *ippool.Allocator, ips []string) []string {
	var cleared []string
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || !alloc.HasIP(ip) {
			continue
		}
		_ = alloc.ReleaseIP(ip)
		cleared = append(cleared, s)
	}
	return cleared
}

func (w *Writer) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.Clock.After(d):
		return nil
	}
}
