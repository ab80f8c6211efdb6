package assign

// What the recipient of a pool write's addresses is told: the Events of
// returned and reclaimed addresses.

import (
	"fmt"
	"strings"
	"time"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// ReturnedMessage is the note of the AddressReturned Event on an enactment
// that pool gave back its addresses (see Taken.DescribeReturn), whoever
// chose them: the pool controller or a self-allocating handler.
func ReturnedMessage(pool string, returned []string) string {
	return fmt.Sprintf("NodeIPPool %s returned %s: this enactment held it before its record was removed (its node left, or its policy stopped matching)",
		pool, strings.Join(returned, ", "))
}

// DescribeReturn describes an address that came back to captureName,
// for ReturnedMessage; "" if it did not.
func (t Taken) DescribeReturn(captureName string) string {
	switch {
	case t.returned != nil:
		return fmt.Sprintf("%s to capture %s (quarantined since %s)", t.IP, captureName, t.returned.Since.UTC().Format(time.RFC3339))
	case t.kept != nil && !t.reclaimed:
		return fmt.Sprintf("%s to capture %s (kept since %s)", t.IP, captureName, t.kept.Since.UTC().Format(time.RFC3339))
	}
	return ""
}

// ReclaimedMessage is the note of the AddressReclaimed Event on an
// enactment that pool gave addresses kept for another node's return (see
// Taken.DescribeReclaim).
func ReclaimedMessage(pool string, reclaimed []string) string {
	return fmt.Sprintf("NodeIPPool %s gave this enactment %s: no other address was free; the node it was kept for no longer gets it back",
		pool, strings.Join(reclaimed, ", "))
}

// DescribeReclaim describes an address kept for another node's return that
// was handed out all the same, for ReclaimedMessage; "" if it was not.
func (t Taken) DescribeReclaim() string {
	if !t.reclaimed {
		return ""
	}
	return fmt.Sprintf("%s, kept since %s for the return of %s", t.IP, t.kept.Since.UTC().Format(time.RFC3339), t.kept.HolderName())
}

// Notes are what the recipient of a pool write's addresses is told with
// Events: the addresses that came back to it, those it was given that
// were kept for another node's return, those its node carried and kept
// (adopted), and those its node carries that the pool could not give it.
type Notes struct {
	Returned, Reclaimed []string
	// Adopted and NotAdopted are by address: "10.0.0.4 on eth1", and
	// "10.0.0.9 on eth1 (it is excluded from the range ...)".
	Adopted, NotAdopted []string
}

// Add notes t, handed out for captureName.
func (n *Notes) Add(t Taken, captureName string) {
	if what := t.DescribeReturn(captureName); what != "" {
		n.Returned = append(n.Returned, what)
	}
	if what := t.DescribeReclaim(); what != "" {
		n.Reclaimed = append(n.Reclaimed, what)
	}
	if t.adopted != nil {
		n.Adopted = append(n.Adopted, t.adopted.String())
	}
	n.NotAdopted = append(n.NotAdopted, t.notAdopted...)
}

// Events returns the Events of n for addresses of pool.
func (n Notes) Events(pool string) []Note {
	var out []Note
	if len(n.Returned) > 0 {
		out = append(out, Note{ippoolv1.ReasonAddressReturned, ReturnedMessage(pool, n.Returned)})
	}
	if len(n.Reclaimed) > 0 {
		out = append(out, Note{ippoolv1.ReasonAddressReclaimed, ReclaimedMessage(pool, n.Reclaimed)})
	}
	if len(n.Adopted) > 0 {
		out = append(out, Note{ippoolv1.ReasonAddressAdopted, AdoptedMessage(pool, n.Adopted)})
	}
	if len(n.NotAdopted) > 0 {
		out = append(out, Note{ippoolv1.ReasonAddressNotAdopted, NotAdoptedMessage(pool, n.NotAdopted)})
	}
	return out
}

// Note is one Event of Notes: a Normal Event's reason and note.
type Note struct {
	Reason, Message string
}

// Type returns the Event type of the note: Warning for an address the
// node carries that the pool could not give it, Normal otherwise.
func (n Note) Type() string {
	if n.Reason == ippoolv1.ReasonAddressNotAdopted {
		return "Warning"
	}
	return "Normal"
}
