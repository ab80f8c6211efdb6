package ippool

import "errors"

var (
	// ErrInvalidRange means a range specification cannot describe a pool.
	ErrInvalidRange = errors.New("invalid range")
	// ErrNotInRange means an address or offset lies outside the range.
	ErrNotInRange = errors.New("not in range")
	// ErrExcluded means an address or offset is excluded or reserved and is
	// never handed out.
	ErrExcluded = errors.New("excluded")
	// ErrAllocated means an offset is already allocated.
	ErrAllocated = errors.New("already allocated")
	// ErrFull means every assignable offset is allocated.
	ErrFull = errors.New("range is full")
	// ErrInvalidSnapshot means a snapshot cannot be decoded.
	ErrInvalidSnapshot = errors.New("invalid snapshot")
	// ErrSnapshotMismatch means a snapshot was taken of another range.
	ErrSnapshotMismatch = errors.New("snapshot belongs to another range")
)
