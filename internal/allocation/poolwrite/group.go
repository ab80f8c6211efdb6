package poolwrite

import (
	"context"
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

// groups commits the quarantines of one pool in groups: a caller that finds
// no group forming for the pool starts one and waits for the pool's write
// turn; everyone who arrives meanwhile joins that group; the starter then
// writes them all in one pool write and tells each its result. Nothing
// waits on purpose: a group gathers only while an earlier write of the same
// pool is in flight. When many nodes are removed at once, their
// quarantines cost a few writes instead of one conflicting write each.
// The zero value is ready to use.
type groups struct {
	mu sync.Mutex
	// forming holds, by pool incarnation, the group that has not started
	// writing yet.
	forming map[types.UID]*group
	// turns serializes the writes of each pool, by name.
	turns map[string]*sync.Mutex
}

// group is one write's worth of quarantines.
type group struct {
	members []*quarantine
	done    chan struct{}
	err     error
}

// do adds q to pool's forming group, or starts one, and returns q's added
// addresses once the group's write is done. write is called by the
// group's starter with every member; its error is every member's.
func (g *groups) do(ctx context.Context, pool *ippoolv1.NodeIPPool, q *quarantine,
	write func(context.Context, *ippoolv1.NodeIPPool, []*quarantine) error) ([]string, error) {
	grp, starter, turn := g.join(pool, q)
	if !starter {
		select {
		case <-grp.done:
			return q.added, grp.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	turn.Lock()
	members := g.close(pool.UID, grp)
	grp.err = write(ctx, pool, members)
	turn.Unlock()
	close(grp.done)
	return q.added, grp.err
}

// join adds q to the pool's forming group, or starts a group with it. It
// returns the group, whether q started it, and the pool's write turn.
func (g *groups) join(pool *ippoolv1.NodeIPPool, q *quarantine) (*group, bool, *sync.Mutex) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming == nil {
		g.forming, g.turns = map[types.UID]*group{}, map[string]*sync.Mutex{}
	}
	turn := g.turns[pool.Name]
	if turn == nil {
		turn = &sync.Mutex{}
		g.turns[pool.Name] = turn
	}
	if grp := g.forming[pool.UID]; grp != nil {
		grp.members = append(grp.members, q)
		return grp, false, turn
	}
	grp := &group{members: []*quarantine{q}, done: make(chan struct{})}
	g.forming[pool.UID] = grp
	return grp, true, turn
}

// close stops grp from taking members and returns them; later callers
// start a new group.
func (g *groups) close(uid types.UID, grp *group) []*quarantine {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forming[uid] == grp {
		delete(g.forming, uid)
	}
	return grp.members
}
