// Package poolwrite is the one place that writes a NodeIPPool's status and
// takes addresses away from an enactment. Both the per-node handler and the
// pool controller use it, so they follow the same protocol.
//
// Pool writes. Writer.Update reads the pool from the API server, restores
// its bitmap, lets the caller change it, and writes the status back under
// the resourceVersion it read. On a conflict it reads again and retries with
// jittered exponential backoff, a bounded number of times, then fails with
// ErrRetriesExhausted. The resourceVersion is the only lock: any number of
// writers in any number of processes may call Update at once.
//
// Giving addresses back. An address leaves its owner in two steps, always in
// this order:
//
//  1. the record goes: the enactment's status.ippool entry (Drop) or the
//     enactment itself (Retire), written under the enactment's
//     resourceVersion, so that of several concurrent callers exactly one
//     succeeds;
//  2. that caller alone clears the bits.
//
// A bit is therefore never cleared while an enactment records its address,
// and never cleared twice (a second clear could free an address that another
// node has taken in between). A process that dies between the steps leaves
// set bits that no enactment claims; the pool controller's garbage
// collection frees them after its grace period.
package poolwrite
