// Package poolwrite is the one writer of a NodeIPPool's status: allocations
// and withdrawals (the pool controller's, and a handler's with
// --self-allocate), the pool controller's quarantines, rebuilds,
// conditions, garbage collection and quarantine lifts all go through
// Writer.Update.
//
// Every write is fenced. Writer.Update reads the pool from the API server,
// lets the caller change it, and writes the status back under the
// resourceVersion it read; with Incarnation it also refuses a pool that was
// re-created under the same name. On a conflict it reads again and retries
// with jittered exponential backoff, a bounded number of times, then fails
// with ErrRetriesExhausted. The resourceVersion is the only lock: any number
// of writers in any number of processes may call Update at once.
//
// Every write is vouched for. The status carries a stamp, a digest of the
// pool's UID, bitmap, in-flight and quarantine entries. Update writes only
// on a status whose stamp matches and stamps what it writes; a status
// changed by anyone else (a hand edit, a status restored from another pool)
// fails with ErrUnvouched until the pool controller rebuilds it from its
// holders' records under the Vouch option.
//
// Addresses in flight. A writer that takes an address for an enactment (the
// pool controller, or a handler with --self-allocate) adds an in-flight
// entry naming the enactment and its resourceVersion (the token) in the
// same write, and records the address under that
// resourceVersion (a pooled policy's node and a claim likewise, under
// the policy's resourceVersion and the claim's UID). If it gives the
// address back unrecorded (Withdraw, WithdrawTaken), it clears only bits
// whose entry still carries its token and that no quarantine holds; the
// pool controller settles an entry that stays unrecorded past its grace
// period (lifecycle.Settler): it fences the holder's record first (so a
// late record fails), then frees the address; a claim's entry is kept
// while its IPAddress may still come, then dropped. A writer that made the
// record itself says so (Writer.Recorded): its next write of the pool,
// made anyway, removes the entry if it is still the same, where the pool
// controller would have read every holder's record to prune it.
//
// Addresses given back. A record that goes (package retire) leaves its
// addresses quarantined (Quarantine), never free: only the pool controller
// frees them, once their former holder no longer carries them.
package poolwrite
