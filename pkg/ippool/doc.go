// Package ippool is the pure allocator behind NodeIPPool: IP⇄offset math for
// IPv4 and IPv6 ranges with excludes, a set of allocated offsets stored as
// sorted runs, and its compact, versioned snapshot.
//
// The package imports only the standard library; it knows nothing of
// Kubernetes. Controllers translate between the API objects and these types.
//
// Offsets count every address from a range's start to its end inclusive
// (offset = ip - start). Excluded and reserved addresses keep their offsets
// and are never handed out.
//
// Errors are sentinel values wrapped with context; callers switch on them with
// errors.Is: ErrInvalidRange, ErrNotInRange, ErrExcluded, ErrAllocated,
// ErrFull, ErrInvalidSnapshot and ErrSnapshotMismatch.
//
// A Range is immutable and safe for concurrent use. An Allocator is not safe
// for concurrent use; the API server's resourceVersion is what serializes
// writers of a pool, not a lock in this package.
package ippool
