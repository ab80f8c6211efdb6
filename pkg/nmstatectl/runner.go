package nmstatectl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// DefaultTimeout is the checkpoint timeout of Apply when Runner.Timeout is
// 0: kubernetes-nmstate's. It must outlast the probes run before Commit.
const DefaultTimeout = 480 * time.Second

// Runner runs one nmstatectl binary. It is safe for concurrent use, but
// nmstatectl itself applies one state at a time per node.
type Runner struct {
	// Path is the nmstatectl binary; "nmstatectl" from PATH when empty.
	Path string
	// Timeout is the checkpoint timeout passed to apply --timeout.
	Timeout time.Duration
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
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	seconds := strconv.Itoa(int(timeout.Round(time.Second) / time.Second))
	_, err = r.run(ctx, "apply", "--no-commit", "--timeout", seconds, f.Name())
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

func (r Runner) run(ctx context.Context, args ...string) ([]byte, error) {
	path := r.Path
	if path == "" {
		path = "nmstatectl"
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &Error{Args: args, Output: stderr.String() + stdout.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// InterfaceAddresses is an interface of an nmstate state with its static
// addresses, as "ip/prefix-length", IPv4 first.
type InterfaceAddresses struct {
	Name      string
	Addresses []string
}

// StaticAddresses returns the interfaces of an nmstate state (YAML or
// JSON, as show prints it) that carry static addresses, in the state's
// order. Addresses of a family configured by DHCP or autoconf are the
// lease's, not static, and are left out.
func StaticAddresses(state []byte) ([]InterfaceAddresses, error) {
	type address struct {
		IP           string `json:"ip"`
		PrefixLength int    `json:"prefix-length"`
	}
	type family struct {
		DHCP     bool      `json:"dhcp"`
		Autoconf bool      `json:"autoconf"`
		Address  []address `json:"address"`
	}
	var s struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 family `json:"ipv4"`
			IPv6 family `json:"ipv6"`
		} `json:"interfaces"`
	}
	if err := yaml.Unmarshal(state, &s); err != nil {
		return nil, fmt.Errorf("read the state's interfaces: %w", err)
	}
	static := func(f family) []address {
		if f.DHCP || f.Autoconf {
			return nil
		}
		return f.Address
	}
	var out []InterfaceAddresses
	for _, i := range s.Interfaces {
		var addrs []string
		for _, a := range slices.Concat(static(i.IPv4), static(i.IPv6)) {
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.IP, a.PrefixLength))
		}
		if len(addrs) > 0 {
			out = append(out, InterfaceAddresses{Name: i.Name, Addresses: addrs})
		}
	}
	return out, nil
}
