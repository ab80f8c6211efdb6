// Package process starts the local cluster's programs detached, knows
// them by PID and binary, stops them, and waits until they serve.
package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a program the local cluster started and left running on its
// own (in a session of its own, output to a log file), known by its PID.
type Process struct {
	PID    int      `json:"pid"`
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	Env    []string `json:"env,omitempty"`
	Log    string   `json:"log"`
	// Health, if set, is the address of its /readyz endpoint.
	Health string `json:"health,omitempty"`
	// Metrics, if set, is the address of its /metrics endpoint.
	Metrics string `json:"metrics,omitempty"`
	// Removed is set on the handler of a node that was removed.
	Removed bool `json:"removed,omitempty"`
	// NetNS, if set, is the network namespace (of /run/netns) it runs in:
	// a real node's.
	NetNS string `json:"netns,omitempty"`
}

// Start starts p detached: it outlives the command that started it.
func (p *Process) Start() error {
	if err := os.MkdirAll(filepath.Dir(p.Log), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command(p.Binary, p.Args...)
	if p.NetNS != "" {
		// nsenter enters only the network namespace and then executes the
		// program, which keeps nsenter's PID and shares the host's mounts
		// (the kubelet's volumes must be seen by containerd).
		cmd = exec.Command("nsenter", append([]string{"--net=" + NetnsPath(p.NetNS), "--", p.Binary}, p.Args...)...)
	}
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Binary, err)
	}
	p.PID = cmd.Process.Pid
	return cmd.Process.Release()
}

// Alive reports whether p's PID still runs p's binary: a PID reused by
// another program, or a zombie, is not p.
func (p *Process) Alive() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(p.Binary)
	if err != nil {
		want = p.Binary
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	// Until nsenter has executed the program, the PID is nsenter's.
	return exe == want || (p.NetNS != "" && filepath.Base(exe) == "nsenter")
}

// Stop sends sig to p and waits up to timeout for it to end; if it has not,
// it is killed. A process that is not running needs nothing.
func (p *Process) Stop(sig syscall.Signal, timeout time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", p.PID, err)
	}
	_ = syscall.Kill(p.PID, syscall.SIGCONT) // a stalled process handles sig only once it runs
	if WaitFor(timeout, func() bool { return !p.Alive() }) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", p.PID, err)
	}
	if !WaitFor(10*time.Second, func() bool { return !p.Alive() }) {
		return fmt.Errorf("process %d (%s) does not end", p.PID, filepath.Base(p.Binary))
	}
	return nil
}

// Signal sends sig to a running p.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("%s is not running", filepath.Base(p.Binary))
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		return fmt.Errorf("signal %d: %w", p.PID, err)
	}
	return nil
}

// Ready waits until p's health endpoint answers 200, failing early if p
// ends; the error points at its log.
func (p *Process) Ready(ctx context.Context, timeout time.Duration, get func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if !p.Alive() {
			return fmt.Errorf("%s ended; see %s", filepath.Base(p.Binary), p.Log)
		}
		if err := get(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not ready after %s; see %s", filepath.Base(p.Binary), timeout, p.Log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HTTPReady returns a readiness probe of a plain HTTP endpoint.
func HTTPReady(url string) func(context.Context) error { return StatusOK(http.DefaultClient, url) }

// StatusOK returns a probe that passes when url answers 200 OK.
func StatusOK(hc *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// Answers returns a readiness probe that passes once url answers at all.
func Answers(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
}

// WaitFor polls cond until it holds or timeout passes, and reports
// whether it held.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return cond()
}

// handedOut holds the ports FreePort returned: one handed out and not yet
// bound by the process it was for reads as free to the kernel, which may
// offer it again (etcd was once given one port for both its client and
// its peer URLs, and could not start).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now and
// that this process has not handed out before. The ports the kernel
// offers that were handed out already are held while it is asked again,
// so that it offers others.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1 that was not handed out already")
}

// HostPort is the loopback address of port.
func HostPort(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// AwaitPort waits up to timeout until port on 127.0.0.1 can be listened on
// again, for a process restarted on the port its clients know. A process
// killed with SIGKILL reads as gone (Alive) as soon as its main thread is a
// zombie, while its other threads, and its listening sockets, may still be
// torn down.
func AwaitPort(port int, timeout time.Duration) error {
	free := func() bool {
		l, err := net.Listen("tcp", HostPort(port))
		if err != nil {
			return false
		}
		_ = l.Close()
		return true
	}
	if !WaitFor(timeout, free) {
		return fmt.Errorf("port %d is still in use after %s", port, timeout)
	}
	return nil
}

// NetnsPath is the path of a named network namespace.
func NetnsPath(name string) string { return filepath.Join("/run/netns", name) }
