package poolwrite

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// member is one caller's part of a write made Together: its mutation, the
// context its audit reason comes from, and, at the write's last attempt
// that called it, whether it ran, whether it saw the pool as read (no
// earlier member's change kept before it), whether its change was kept,
// and its own error.
type member struct {
	ctx               context.Context
	mutate            Mutation
	ran, asRead, kept bool
	err               error
}

// Together applies mutate to the pool incarnation as Update does, in one
// write with the mutations of this Writer's other callers that start while
// a write of the same pool by Together is in flight (see groups): many
// holders asking for addresses at once cost a few pool writes, not one
// conflicting write each. Each mutation sees the pool as the ones before
// it in the group left it, and changes a copy that is kept only if it
// returns true and no error; its error (a panic too) is its own, and is
// returned to its caller alone. An error of the write (the pool gone or
// re-created, the status unvouched, the retries exhausted) is every
// caller's, but for one that asked for no change (it found its address
// taken already, or was refused) on the pool as read, which would have
// written nothing alone either: a refusal that came of another caller's
// change is not kept when that change is not written. The audit trail
// gives each address the reason of its own caller's context; the write
// runs under the context of the group's first caller.
func (w *Writer) Together(ctx context.Context, pool *ippoolv1.NodeIPPool, mutate Mutation) error {
	m := &member{ctx: ctx, mutate: mutate}
	written, err := w.together.do(ctx, pool, m, w.writeTogether)
	switch {
	case !written:
		return err
	case m.err != nil:
		return m.err
	case err == nil, Gone(err):
		return err
	case m.ran && m.asRead && !m.kept:
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
			return m.run(p, alloc, true), nil
		}, Incarnation(pool.UID))
		return err
	}
	notes := audit.Notes{}
	_, err := w.Update(audit.WithNotes(ctx, notes), pool.Name, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		clear(notes)
		changed := false
		for _, m := range ms {
			mine, bits := p.DeepCopy(), alloc.Clone()
			if !m.run(mine, bits, !changed) {
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

// run calls the member's mutation on a pool seen as read or not, and
// notes what it asked: it reports whether the change is to be kept. A
// mutation that panics keeps nothing, and its caller is told; the others
// of its group are written.
func (m *member) run(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator, asRead bool) (kept bool) {
	m.ran, m.asRead, m.kept, m.err = true, asRead, false, nil
	defer func() {
		if r := recover(); r != nil {
			log.FromContext(m.ctx).Error(fmt.Errorf("%v", r), "a pool mutation panicked", "stack", string(debug.Stack()))
			m.err, kept = fmt.Errorf("%w: %v", errMutationPanicked, r), false
		}
	}()
	changed, err := m.mutate(p, alloc)
	m.kept, m.err = changed && err == nil, err
	return m.kept
}

// errMutationPanicked is the error of a caller of Together whose mutation
// panicked.
var errMutationPanicked = errors.New("the pool mutation panicked (a bug: see the log)")
