// Package periods holds the pool controller's timing: the defaults of its
// grace period, quarantine period and departure hold, and the check that
// refuses values that would break the protocol. The pool controller's
// command and the local cluster share them, so they live below both.
package periods

import (
	"fmt"
	"time"
)

// DefaultGrace is how long a bit may stay unclaimed before garbage
// collection frees it.
const DefaultGrace = 2 * time.Minute

// DefaultQuarantine is how long an address taken from its holder may
// stay quarantined before the pool reports it overdue
// (ReleasesConfirmed=False). No timer lifts a quarantine: only evidence
// that the holder no longer carries the address does. It is also how long a
// departed node's address is kept for its return, and it caps the departure
// hold.
const DefaultQuarantine = 5 * time.Minute

// DefaultDepartureHold is how long the addresses of a deleted Node stay
// quarantined by default. An admin who deletes a Node before powering its
// machine off leaves that machine running with its addresses: its handler
// takes them off at once when its Node goes, then retries every two
// seconds, until kubelet's pod garbage collector deletes the handler's
// pod about 40 s after the Node.
const DefaultDepartureHold = 30 * time.Second

// minPeriod is the shortest grace or quarantine period accepted: a handler
// needs a moment between taking an address and recording it.
const minPeriod = time.Second

// Check refuses a grace or quarantine period too short for the protocol,
// or a negative departure hold, with a message that says what to set.
func Check(grace, quarantine, hold time.Duration) error {
	if grace < minPeriod {
		return fmt.Errorf("--gc-grace-period %s is too short: addresses in flight would be revoked before their handlers record them; set it to %s or more (default %s)",
			grace, minPeriod, DefaultGrace)
	}
	if quarantine < minPeriod {
		return fmt.Errorf("--quarantine-period %s is too short: it caps the departure hold, and the states of quarantined holders are asked for every tenth of it; set it to %s or more (default %s)",
			quarantine, minPeriod, DefaultQuarantine)
	}
	if hold < 0 {
		return fmt.Errorf("--departure-hold %s is negative: set it to 0 (a deleted Node's addresses are free at once) or more (default %s)",
			hold, DefaultDepartureHold)
	}
	return nil
}
