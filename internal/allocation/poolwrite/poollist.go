package poolwrite

import (
	"context"
	"fmt"
	"sync"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// OnePoolList returns a context in which the Writer's Quarantine and
// ConfirmRelease read the list of pools once, from the API server, and
// share it: a controller that releases the addresses of many holders in
// one pass (a pooled policy deleted, with a thousand nodes) makes one list
// of every pool for the pass instead of one per holder. The list is as
// fresh as the pass's first quarantine: a pool re-created since then is
// found by the write (ErrReplaced) and the pools are listed again; one
// created since then holds none of the addresses (the pools' ranges do
// not overlap while the first one is there). Use it for one pass, not
// longer.
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
// pass listed already (OnePoolList). The caller must not change them.
func (w *Writer) listPools(ctx context.Context) ([]ippoolv1.NodeIPPool, error) {
	shared, _ := ctx.Value(poolListKey{}).(*poolList)
	if shared != nil {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.read {
			return shared.pools, nil
		}
	}
	var list ippoolv1.NodeIPPoolList
	if err := w.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list NodeIPPools: %w", err)
	}
	if shared != nil {
		shared.pools, shared.read = list.Items, true
	}
	return list.Items, nil
}

// forgetPools makes the next listPools of the pass list again: a pool was
// re-created since the list.
func forgetPools(ctx context.Context) {
	if shared, _ := ctx.Value(poolListKey{}).(*poolList); shared != nil {
		shared.mu.Lock()
		shared.pools, shared.read = nil, false
		shared.mu.Unlock()
	}
}
