package assign

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
)

// Ask is what one holder asks of one pool write: an address for each of
// its captures, all or none, held by in-flight entries under its token
// until its record names them. It is the one way every kind of holder
// takes addresses (an enactment served by the pool controller or taking
// its own, a pooled policy's node, a Cluster API claim).
type Ask struct {
	Claimant Claimant
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
		t, err := c.Take(a.Claimant, name)
		if err != nil {
			for i := len(taken) - 1; i >= 0; i-- {
				c.Give(taken[i])
			}
			return nil, len(taken), err
		}
		taken = append(taken, t)
	}
	for _, t := range taken {
		poolstatus.AddInFlight(c.pool, t.InFlight(a.Claimant.Holder, a.Token, since))
	}
	return taken, len(taken), nil
}
