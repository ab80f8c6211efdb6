package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"sync"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// OnePoolList returns a context in which the Writer's Quarantine and
// ConfirmRelease read the list of pools once, from the API server, and
// share it: a controller that releases the addresses of many holders in
// one pass (a pooled policy deleted, with a thousand nodes) makes one list
// of every pool for the pass instead of one per holder. The list is as
// fresh as the pass's first quarantine: when a quarantine finds a listed
// pool re-created (ErrReplaced) or gone, or an address that no listed pool
// hands out (a pool deleted and another created over its range, a range
// widened), the pools are listed again. Use it for one pass, not longer.
func OnePoolList(ctx context.Context) context.Context {
	return context.WithValue(ctx, poolListKey{}, &poolList{})
}

type poolListKey struct{}

// poolList is the list of pools shared by the calls of one pass.
type poolList struct {
	mu    sync.Mutex
	pools []ippoolv1.NodeIPPool
	read  bool
}

// listPools lists the pools from the API server, or returns those the
// pass listed already (OnePoolList), and reports which. The caller must
// not change them.
func (w *Writer) listPools(ctx context.Context) (pools []ippoolv1.NodeIPPool, reused bool, err error) {
	shared, _ := ctx.Value(poolListKey{}).(*poolList)
	if shared != nil {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.read {
			return shared.pools, true, nil
		}
	}
	var list ippoolv1.NodeIPPoolList
	if err := w.Reader.List(ctx, &list); err != nil {
		return nil, false, fmt.Errorf("list NodeIPPools: %w", err)
	}
	if shared != nil {
		shared.pools, shared.read = list.Items, true
	}
	return list.Items, false, nil
}

// errStaleList says that the pools a pass listed earlier may not be those
// that hand out an address now: one of them is gone, or none of them
// hands out one of the addresses (a pool created, or a range widened,
// since): Quarantine lists them again.
var errStaleList = errors.New("the pass's list of pools is behind")

// forgetPools makes the next listPools of the pass list again: a pool was
// re-created, or may have been, since the list.
func forgetPools(ctx context.Context) {
	if shared, _ := ctx.Value(poolListKey{}).(*poolList); shared != nil {
		shared.mu.Lock()
		shared.pools, shared.read = nil, false
		shared.mu.Unlock()
	}
}
