// Package nmstatectl reads and applies a node's network state through the
// nmstatectl command line:
//
//	nmstatectl show --json
//	nmstatectl apply --no-commit --timeout <seconds> <file>
//	nmstatectl commit
//	nmstatectl rollback
//
// Apply creates a checkpoint, commits it when the apply succeeded and rolls
// it back otherwise, so a failed apply leaves the node as it was. The binary
// is configurable: production uses the real nmstatectl, tests and local
// clusters the project's simulator (cmd/nmstatectl-sim) with the same command
// line.
package nmstatectl
