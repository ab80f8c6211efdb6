package poolwrite

import (
	"context"
	"time"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// member is one caller's part of a write made Together: its mutation, the
// context its audit reason comes from, and the mutation's own error at
// the write's last attempt.
type member struct {
	ctx    context.Context
	mutate Mutation
	err    error
}

// Together applies mutate to the pool incarnation as Update does, in one
// write with the mutations of this Writer's other callers that start while
// a write of the same pool by Together is in flight (see groups): many
// holders asking for addresses at once cost a few pool writes, not one
// conflicting write each. Each mutation sees the pool as the ones before
// it in the group left it, and changes a copy that is kept only if it
// returns true and no error; its error is its own, and is returned to its
// caller alone. An error of the write (the pool gone or re-created, the
// status unvouched, the retries exhausted) is every caller's. The audit
// trail gives each address the reason of its own caller's context.
func (w *Writer) Together(ctx context.Context, pool *ippoolv1.NodeIPPool, mutate Mutation) error {
	m := &member{ctx: ctx, mutate: mutate}
	written, err := w.together.do(ctx, pool, m, w.writeTogether)
	if written && err == nil {
		err = m.err
	}
	return err
}

// writeTogether applies the mutations of ms in order, in one write of the
// pool incarnation. A group of one is Update itself.
func (w *Writer) writeTogether(ctx context.Context, pool *ippoolv1.NodeIPPool, ms []*member) error {
	if len(ms) == 1 {
		_, err := w.Update(ms[0].ctx, pool.Name, ms[0].mutate, Incarnation(pool.UID))
		return err
	}
	notes := audit.Notes{}
	_, err := w.Update(audit.WithNotes(ctx, notes), pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		clear(notes)
		changed := false
		for _, m := range ms {
			mine, bits := p.DeepCopy(), alloc.Clone()
			ok, err := m.mutate(mine, bits)
			m.err = err
			if err != nil || !ok {
				continue
			}
			if w.Audit != nil {
				notes.Keep(audit.Changes(m.ctx, p.Name, alloc.Range(), &p.Status, &mine.Status, alloc, bits, time.Time{}))
			}
			*p, *alloc = *mine, *bits
			changed = true
		}
		return changed, nil
	}, Incarnation(pool.UID))
	return err
}
