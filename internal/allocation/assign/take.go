package assign

import (
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// Ask is what one holder asks of one pool write: an address for each of
// its captures, all or none, held by in-flight entries under its token
// until its record names them. It is the one way every kind of holder
// takes addresses (an enactment served by the pool controller or taking
// its own, a pooled policy's node, a Cluster API claim).
type Ask struct {
	// Asker is who asks.
	Asker Asker
	// Captures names the captures that need an address; a holder with no
	// capture (a claim) asks for one address under the name "".
	Captures []string
	// Token fences the in-flight entries: the holder records the
	// addresses only under it, and an entry whose holder has moved past
	// it is revoked (docs/protocol.md, "Revoking an allocation in
	// flight").
	Token string
}

// TakeAll takes an address for each capture of a, in order, and adds its
// in-flight entry (Taken.InFlight, since since) to the Chooser's pool. All
// or none: when a capture finds no address, the addresses taken for the
// earlier ones are given back, the pool is left as it was, and the error
// of Take (wrapping ippool.ErrFull) is returned with the number of
// captures that had found one.
func (c *Chooser) TakeAll(a Ask, since metav1.Time) ([]Taken, int, error) {
	taken := make([]Taken, 0, len(a.Captures))
	for _, name := range a.Captures {
		t, err := c.Take(a.Asker, name)
		if err != nil {
			for i := len(taken) - 1; i >= 0; i-- {
				c.Give(taken[i])
			}
			return nil, len(taken), err
		}
		taken = append(taken, t)
	}
	for _, t := range taken {
		poolstatus.AddInFlight(c.pool, t.InFlight(a.Asker.Holder, a.Token, since))
	}
	return taken, len(taken), nil
}

// Served is what one ask got from one pool write: either the addresses
// that in-flight entries of the ask's holder under its token held already
// (Resumed: a pass took them and died, or its record write failed,
// before its record), or an address for each of its captures, in order,
// taken now (Taken).
type Served struct {
	Resumed []netip.Addr
	Taken   []Taken
}

// Unservable refuses an ask that needs an address from a pool that may
// not hand out any now (poolstatus.Unservable says why).
type Unservable struct{ Why string }

func (u *Unservable) Error() string { return u.Why }

// Serve is the one rule by which every kind of holder gets addresses in
// a pool write. It resumes first: an ask whose holder has in-flight
// entries of its own (Resumable) gets their addresses back and takes
// nothing new; its holder records them, and asks again for any capture
// they do not cover. Otherwise a pool being deleted or not
// available refuses the ask (*Unservable), and TakeAll takes its
// captures, all or none (an error wrapping ippool.ErrFull).
//
// What a kind does with resumed addresses is its own. A kind whose record
// has one writer (a claim, a pooled policy's node) records them; a
// pooled policy whose record is refused withdraws only what the policy,
// read again, does not record (another pass may have resumed it). An
// enactment, whose record the pool controller and a self-allocating
// handler may both write under one token, does not: the pool controller
// takes them as served already, and a handler refuses an unservable pool
// itself and asks with TakeAll alone. A writer that resumed another's
// entry could, on a conflict, withdraw an address that the other
// recorded.
func (c *Chooser) Serve(a Ask, since metav1.Time) (Served, error) {
	return serve(c.pool, a, func() ([]Taken, error) {
		taken, _, err := c.TakeAll(a, since)
		return taken, err
	})
}

// ServeOne is Serve for an ask of one address that the holder names
// instead of the pool's choice (a claim's requested address, or the
// address its IPAddress is restored with). It keeps Serve's order: it
// resumes, refuses a pool that may not hand out addresses, and only then
// calls take, which allocates the named address on the pool's allocator
// or returns the error that refuses it; the address it took is held by
// an in-flight entry under the ask's token, as any other.
func ServeOne(pool *ippoolv1.NodeIPPool, a Ask, since metav1.Time, take func() (netip.Addr, error)) (Served, error) {
	return serve(pool, a, func() ([]Taken, error) {
		ip, err := take()
		if err != nil {
			return nil, err
		}
		t := Taken{IP: ip}
		poolstatus.AddInFlight(pool, t.InFlight(a.Asker.Holder, a.Token, since))
		return []Taken{t}, nil
	})
}

// serve is the order of Serve and ServeOne: resume, refuse, take.
func serve(pool *ippoolv1.NodeIPPool, a Ask, take func() ([]Taken, error)) (Served, error) {
	if resumed := Resumable(pool, a); len(resumed) > 0 {
		return Served{Resumed: resumed[:min(len(resumed), len(a.Captures))]}, nil
	}
	if why := poolstatus.Unservable(pool); why != "" {
		return Served{}, &Unservable{Why: why}
	}
	taken, err := take()
	return Served{Taken: taken}, err
}

// Resumable returns, in the pool's order, the addresses of the in-flight
// entries that are the ask's holder's own. A holder with a sole writer
// (holder.Ref.SoleWriter: a claim, a pooled policy's node) owns those
// under the ask's token that are neither quarantined (recorded, then
// released: not the holder's any more) nor held by its record already;
// an entry under another token is dead (its record can no longer be
// written under it) and is left to be revoked. Every entry naming a
// holder of several writers (an enactment) is its own, and means that it
// is being served.
func Resumable(pool *ippoolv1.NodeIPPool, a Ask) []netip.Addr {
	var out []netip.Addr
	name := a.Asker.Holder.String()
	everyToken := !a.Asker.Holder.SoleWriter()
	for _, e := range pool.Status.InFlight {
		if e.HolderName() != name {
			continue
		}
		if !everyToken && (e.Token != a.Token || poolstatus.QuarantineOf(pool, e.IP) != nil) {
			continue
		}
		ip, err := netip.ParseAddr(e.IP)
		if err != nil || (!everyToken && a.Asker.Holds != nil && a.Asker.Holds(ip)) {
			continue
		}
		out = append(out, ip)
	}
	return out
}
