package poolwrite

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// quarantine is one caller's part of a grouped quarantine write: what to
// quarantine for whom, and, once written, the addresses it added.
type quarantine struct {
	holder Holder
	ips    []netip.Addr
	added  []string
}

// groups commits the writes of one pool in groups: a caller that finds no
// group forming for the pool starts one and waits for the pool's write
// turn; everyone who arrives meanwhile joins that group; the starter then
// writes them all in one pool write and tells each its result. Nothing
// waits on purpose: a group gathers only while an earlier write of the same
// pool is in flight. When many nodes are removed at once, their
// quarantines cost a few writes instead of one conflicting write each; when
// many claims ask at once, so do their addresses. M is one caller's part,
// which the write fills with its result. The zero value is ready to use.
type groups[M any] struct {
	mu sync.Mutex
	// forming holds, by pool incarnation, the group that has not started
	// writing yet.
	forming map[types.UID]*group[M]
	// turns serializes the writes of each pool, by name.
	turns map[string]*sync.Mutex
}

// group is one write's worth of callers' parts.
type group[M any] struct {
	members []M
	done    chan struct{}
	err     error
}

// do adds m to pool's forming group, or starts one, and returns once the
// group's write is done. write is called by the group's starter with every
// member; its error is every member's. written is false when ctx ended
// first: the write may still fill m, which the caller must not read then.
func (g *groups[M]) do(ctx context.Context, pool *ippoolv1.NodeIPPool, m M,
	write func(context.Context, *ippoolv1.NodeIPPool, []M) error) (written bool, err error) {
	grp, starter, turn := g.join(pool, m)
	if !starter {
		select {
		case <-grp.done:
			return true, grp.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	turn.Lock()
	defer close(grp.done)
	defer turn.Unlock()
	grp.err = errWriteFailed // until write returns: it may panic
	grp.err = write(ctx, pool, g.close(pool.UID, grp))
	return true, grp.err
}

// errWriteFailed is the group's error when its write panicked: the
// members are told, and the pool's turn passes on.
var errWriteFailed = errors.New("the shared pool write of this caller's group failed")

// join adds m to the pool's forming group, or starts a group with it. It
// returns the group, whether m started it, and the pool's write turn.
func (g *groups[M]) join(pool *ippoolv1.NodeIPPool, m M) (*group[M], bool, *sync.Mutex) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming == nil {
		g.forming, g.turns = map[types.UID]*group[M]{}, map[string]*sync.Mutex{}
	}
	turn := g.turns[pool.Name]
	if turn == nil {
		turn = &sync.Mutex{}
		g.turns[pool.Name] = turn
	}
	if grp := g.forming[pool.UID]; grp != nil {
		grp.members = append(grp.members, m)
		return grp, false, turn
	}
	grp := &group[M]{members: []M{m}, done: make(chan struct{})}
	g.forming[pool.UID] = grp
	return grp, true, turn
}

// close stops grp from taking members and returns them; later callers
// start a new group.
func (g *groups[M]) close(uid types.UID, grp *group[M]) []M {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming[uid] == grp {
		delete(g.forming, uid)
	}
	return grp.members
}
