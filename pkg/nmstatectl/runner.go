package nmstatectl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is the checkpoint timeout of Apply when Runner.Timeout is
// 0: kubernetes-nmstate's. It must outlast the probes run before Commit.
const DefaultTimeout = 480 * time.Second

// DefaultCommandTimeout bounds every command but apply when
// Runner.CommandTimeout is 0: a hung nmstatectl (NetworkManager not
// answering) must not hold the node's network lock, or the handler, for
// ever.
const DefaultCommandTimeout = 2 * time.Minute

// Runner runs one nmstatectl binary. It is safe for concurrent use, but
// nmstatectl itself applies one state at a time per node.
type Runner struct {
	// Path is the nmstatectl binary; "nmstatectl" from PATH when empty.
	Path string
	// Timeout is the checkpoint timeout passed to apply --timeout; it
	// also bounds how long the apply command may run.
	Timeout time.Duration
	// CommandTimeout bounds every other command (show, commit, rollback,
	// --version); DefaultCommandTimeout when 0. A command that runs longer
	// is killed and fails.
	CommandTimeout time.Duration
	// Env is added to the command's environment (the simulator reads its
	// state file from it).
	Env []string
}

// Error is a failed nmstatectl command with its output.
type Error struct {
	Args   []string
	Output string
	Err    error
}

func (e *Error) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		return fmt.Sprintf("nmstatectl %s: %v", strings.Join(e.Args, " "), e.Err)
	}
	return fmt.Sprintf("nmstatectl %s: %v: %s", strings.Join(e.Args, " "), e.Err, out)
}

func (e *Error) Unwrap() error { return e.Err }

// Show returns the node's current state as JSON.
func (r Runner) Show(ctx context.Context) ([]byte, error) {
	return r.run(ctx, "show", "--json")
}

// Version returns what nmstatectl --version prints, trimmed.
func (r Runner) Version(ctx context.Context) (string, error) {
	out, err := r.run(ctx, "--version")
	return strings.TrimSpace(string(out)), err
}

// Apply applies desired (YAML or JSON) under a checkpoint that nmstatectl
// rolls back by itself unless Commit follows within Timeout. If the apply
// fails, nmstatectl has rolled it back; the error carries its output.
func (r Runner) Apply(ctx context.Context, desired []byte) error {
	f, err := os.CreateTemp("", "nmstate-desired-*.yaml")
	if err != nil {
		return fmt.Errorf("write the desired state: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(desired); err != nil {
		_ = f.Close()
		return fmt.Errorf("write the desired state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the desired state: %w", err)
	}
	timeout := r.checkpointTimeout()
	seconds := strconv.Itoa(int(timeout.Round(time.Second) / time.Second))
	_, err = r.runFor(ctx, timeout, "apply", "--no-commit", "--timeout", seconds, f.Name())
	return err
}

// Commit makes the applied state permanent.
func (r Runner) Commit(ctx context.Context) error {
	_, err := r.run(ctx, "commit")
	return err
}

// Rollback returns the node to the state before the last uncommitted
// Apply. It runs to the end even if ctx is cancelled: a node must not be
// left between two states. nmstatectl fails when there is nothing to roll
// back.
func (r Runner) Rollback(ctx context.Context) error {
	_, err := r.run(context.WithoutCancel(ctx), "rollback")
	return err
}

func (r Runner) checkpointTimeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

// run runs a command for at most CommandTimeout.
func (r Runner) run(ctx context.Context, args ...string) ([]byte, error) {
	timeout := r.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	return r.runFor(ctx, timeout, args...)
}

// runFor runs a command for at most timeout; one that runs longer is
// killed and its error says so.
func (r Runner) runFor(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := r.Path
	if path == "" {
		path = "nmstatectl"
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	// A killed command's children may hold its output open: stop waiting
	// for them soon after.
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("%w: no answer within %s", context.DeadlineExceeded, timeout)
		}
		return nil, &Error{Args: args, Output: stderr.String() + stdout.String(), Err: err}
	}
	return stdout.Bytes(), nil
}
