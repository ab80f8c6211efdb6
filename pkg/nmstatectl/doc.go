// Package nmstatectl reads and applies a node's network state through the
// nmstatectl command line:
//
//	nmstatectl show --json
//	nmstatectl apply --no-commit --timeout <seconds> <file>
//	nmstatectl commit
//	nmstatectl rollback
//
// Apply applies a state without committing it, under a checkpoint that
// nmstate rolls back by itself after the timeout; the caller commits it
// once its probes pass, or rolls it back, so a failed apply leaves the
// node as it was. The binary
// is configurable: production uses the real nmstatectl, tests and local
// clusters the project's simulator (cmd/nmstatectl-sim) with the same command
// line.
package nmstatectl
