package poolwrite

import (
	"context"
	"time"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// member is one caller's part of a write made Together: its mutation, the
// context its audit reason comes from, and, at the write's last attempt
// that called it, whether it ran, whether its change was kept, and its own
// error.
type member struct {
	ctx       context.Context
	mutate    Mutation
	ran, kept bool
	err       error
}

// Together applies mutate to the pool incarnation as Update does, in one
// write with the mutations of this Writer's other callers that start while
// a write of the same pool by Together is in flight (see groups): many
// holders asking for addresses at once cost a few pool writes, not one
// conflicting write each. Each mutation sees the pool as the ones before
// it in the group left it, and changes a copy that is kept only if it
// returns true and no error; its error is its own, and is returned to its
// caller alone. An error of the write (the pool gone or re-created, the
// status unvouched, the retries exhausted) is that of every caller whose
// change it was to write, or whose mutation it did not call; a caller that
// asked for no change (it found its address taken already, or was
// refused) is not told it. The audit trail gives each address the reason
// of its own caller's context; the write runs under the context of the
// group's first caller.
func (w *Writer) Together(ctx context.Context, pool *ippoolv1.NodeIPPool, mutate Mutation) error {
	m := &member{ctx: ctx, mutate: mutate}
	written, err := w.together.do(ctx, pool, m, w.writeTogether)
	switch {
	case !written:
		return err
	case m.err != nil:
		return m.err
	case m.ran && !m.kept:
		return nil
	}
	return err
}

// writeTogether applies the mutations of ms in order, in one write of the
// pool incarnation. A group of one changes the pool itself; a larger one
// gives each mutation a copy.
func (w *Writer) writeTogether(ctx context.Context, pool *ippoolv1.NodeIPPool, ms []*member) error {
	if len(ms) == 1 {
		m := ms[0]
		_, err := w.Update(m.ctx, pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			return m.run(p, alloc), nil
		}, Incarnation(pool.UID))
		return err
	}
	notes := audit.Notes{}
	_, err := w.Update(audit.WithNotes(ctx, notes), pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		clear(notes)
		changed := false
		for _, m := range ms {
			mine, bits := p.DeepCopy(), alloc.Clone()
			if !m.run(mine, bits) {
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

// run calls the member's mutation and notes what it asked: it reports
// whether the change is to be kept.
func (m *member) run(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) bool {
	changed, err := m.mutate(p, alloc)
	m.ran, m.kept, m.err = true, changed && err == nil, err
	return m.kept
}
