// Command nmstatectl-sim simulates nmstatectl for machines without
// NetworkManager (tests and local clusters). It keeps one node's state in a
// YAML file and understands the command lines of our handler and of
// kubernetes-nmstate's, in nmstatectl's formats:
//
//	nmstatectl-sim show [--json]
//	nmstatectl-sim apply [--no-commit] [--timeout SECONDS] [FILE | -]
//	nmstatectl-sim commit
//	nmstatectl-sim rollback
//	nmstatectl-sim policy [--current FILE] [--json] [--captured FILE] [--output-captured FILE] POLICY
//	nmstatectl-sim st -
//	nmstatectl-sim --version
//
// Verbosity flags (-v, -vv, -vvv) are accepted anywhere and change
// nothing. show prints YAML, or JSON with --json; apply reads the desired
// state from standard input when it is given no file or "-". policy and st
// are described on their functions (policy.go).
//
// Called as "ping" (through a link of that name), it answers the gateway
// probe of kubernetes-nmstate's handler from the simulated network (see
// ping.go).
//
// The state file is $NMSTATECTL_SIM_STATE (default ./nmstate-sim.yaml); a
// missing file starts as a node like a real one: eth0 configured by DHCP
// (addresses, default routes and nameserver in the running state), eth1
// and eth2 (see defaultState).
//
// apply merges the desired state into the current one as nmstate does,
// for what policies touch:
//   - interfaces merge by name, key by key; state: absent removes one;
//     routes through an interface that goes down or away leave the
//     running routes;
//   - an interface that is a port of a bond, a Linux bridge or an OVS
//     bridge has no IP: a desired state that enables IP on one is
//     refused, as nmstate refuses it, and one becoming a port loses its
//     addresses (a VRF's ports and an OVS bridge's internal interfaces
//     keep theirs);
//   - routes.config entries are added to the config and the running
//     routes (table 254 unless given); an entry with state: absent
//     removes every route it matches from both;
//   - dns-resolver.config replaces the config, and its servers (when it
//     has any) become the running ones;
//   - other top-level keys replace.
//
// With --no-commit the result is live at once (show reports it) and waits
// in <state>.checkpoint until commit; rollback, or the timeout passing,
// returns to the state before it. rollback with no checkpoint fails, as
// nmstatectl's does.
//
// Failures can be injected: each line "SUBCOMMAND: MESSAGE" of <state>.fail
// makes that subcommand print MESSAGE and exit 1.
//
// Every apply that succeeds adds a line to <state>.applies (its time and
// the desired state on one line, as JSON), so that tests can count what a
// node was asked to apply.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Version is what --version prints.
const Version = "nmstatectl-sim 2.2 (a simulator of nmstatectl)"

// StateEnv names the environment variable holding the state file's path.
const StateEnv = "NMSTATECTL_SIM_STATE"

// defaultState is a new node's network, as nmstatectl show reports a real
// one: eth0 configured by DHCP (an IPv4 lease and an IPv6 autoconf
// address, both in the running state), the default routes and the
// nameserver it learned, and two unconfigured NICs. %s, %s and %s are the
// node's IPv4 address, its IPv6 address and its MAC address's last bytes,
// which differ between state files.
const defaultState = `interfaces:
- name: eth0
  type: ethernet
  state: up
  mac-address: 52:54:00:%[3]s
  ipv4:
    enabled: true
    dhcp: true
    address:
    - ip: %[1]s
      prefix-length: 16
  ipv6:
    enabled: true
    dhcp: true
    autoconf: true
    address:
    - ip: %[2]s
      prefix-length: 64
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: false
  ipv6:
    enabled: false
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: false
  ipv6:
    enabled: false
dns-resolver:
  config: {}
  running:
    server:
    - 192.168.0.1
routes:
  config: []
  running:
  - destination: 0.0.0.0/0
    next-hop-address: 192.168.0.1
    next-hop-interface: eth0
    metric: 100
    table-id: 254
  - destination: 192.168.0.0/16
    next-hop-address: 0.0.0.0
    next-hop-interface: eth0
    metric: 100
    table-id: 254
  - destination: ::/0
    next-hop-address: fd00:192:168::1
    next-hop-interface: eth0
    metric: 100
    table-id: 254
`

// newNodeState returns the default state of the node whose state file is
// path: its addresses are derived from the path, so that the nodes of one
// cluster differ.
func newNodeState(path string) []byte {
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	n := h.Sum32()%(254*256-256) + 256 // 192.168.1.0 to 192.168.254.255
	hi, lo := n/256, n%256
	v4 := fmt.Sprintf("192.168.%d.%d", hi, lo)
	v6 := fmt.Sprintf("fd00:192:168::%x:%x", hi, lo)
	mac := fmt.Sprintf("00:%02x:%02x", hi, lo)
	return fmt.Appendf(nil, defaultState, v4, v6, mac)
}

func main() {
	path := os.Getenv(StateEnv)
	if path == "" {
		path = "nmstate-sim.yaml"
	}
	sim := &simulator{path: path, now: time.Now, stdin: os.Stdin}
	run := sim.run
	if filepath.Base(os.Args[0]) == "ping" {
		run = sim.ping
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type simulator struct {
	path  string
	now   func() time.Time
	stdin io.Reader
}

type checkpoint struct {
	Deadline time.Time      `json:"deadline"`
	State    map[string]any `json:"state"`
}

const usage = "usage: nmstatectl-sim show [--json] | apply [--no-commit] [--timeout N] [FILE | -] | commit | rollback | " +
	"policy [--current FILE] [--json] [--captured FILE] [--output-captured FILE] POLICY | st - | --version"

func (s *simulator) run(args []string, stdout io.Writer) error {
	args = withoutVerbosity(args)
	if len(args) == 0 {
		return errors.New(usage)
	}
	if err := s.injectedFailure(args[0]); err != nil {
		return err
	}
	switch args[0] {
	case "--version", "-V":
		_, err := fmt.Fprintln(stdout, Version)
		return err
	case "show":
		return s.show(args[1:], stdout)
	case "apply":
		return s.apply(args[1:])
	case "commit":
		return s.commit()
	case "rollback":
		return s.rollback()
	case "policy":
		return s.policy(args[1:], stdout)
	case "st", "statistic":
		return s.statistic(args[1:], stdout)
	}
	return fmt.Errorf("unknown subcommand %q; %s", args[0], usage)
}

// withoutVerbosity drops nmstatectl's verbosity flags (-v, -vv, -vvv).
func withoutVerbosity(args []string) []string {
	var out []string
	for _, a := range args {
		if len(a) > 1 && strings.Trim(a, "v") == "-" {
			continue
		}
		out = append(out, a)
	}
	return out
}

func (s *simulator) injectedFailure(sub string) error {
	f, err := os.Open(s.path + ".fail")
	if err != nil {
		return nil // no failure configured
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cmd, msg, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(cmd) == sub {
			return errors.New(strings.TrimSpace(msg))
		}
	}
	return nil
}

// show prints the live state: YAML, as nmstatectl does, or JSON with
// --json.
func (s *simulator) show(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of YAML")
	if err := fs.Parse(args); err != nil {
		return err
	}
	state, err := s.current()
	if err != nil {
		return err
	}
	if !*asJSON {
		raw, err := yaml.Marshal(state)
		if err != nil {
			return err
		}
		_, err = stdout.Write(raw)
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(state)
}

func (s *simulator) apply(args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	noCommit := fs.Bool("no-commit", false, "keep the result in a checkpoint until commit")
	timeout := fs.Int("timeout", 60, "seconds before an uncommitted checkpoint is discarded")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return errors.New("apply: want one state file, or the state on standard input")
	}
	raw, err := s.readInput(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	var desired map[string]any
	if err := yaml.Unmarshal(raw, &desired); err != nil {
		return fmt.Errorf("apply: invalid desired state: %w", err)
	}
	state, err := s.current()
	if err != nil {
		return err
	}
	merged, err := merge(state, desired)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if !*noCommit {
		err = writeJSONAsYAML(s.path, merged)
	} else {
		deadline := s.now().Add(time.Duration(*timeout) * time.Second)
		err = writeJSONAsYAML(s.path+".checkpoint", checkpoint{Deadline: deadline, State: merged})
	}
	if err != nil {
		return err
	}
	return s.logApply(desired)
}

// readInput reads a file, or standard input when name is "" or "-".
func (s *simulator) readInput(name string) ([]byte, error) {
	if name == "" || name == "-" {
		return io.ReadAll(s.stdin)
	}
	return os.ReadFile(name)
}

// logApply adds an applied desired state to <state>.applies.
func (s *simulator) logApply(desired map[string]any) error {
	line, err := json.Marshal(desired)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(s.path+".applies", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	_, err = fmt.Fprintf(f, "%s %s\n", s.now().UTC().Format(time.RFC3339Nano), line)
	return errors.Join(err, f.Close())
}

func (s *simulator) commit() error {
	var cp checkpoint
	raw, err := os.ReadFile(s.path + ".checkpoint")
	if err != nil {
		return errors.New("commit: no checkpoint to commit")
	}
	if err := yaml.Unmarshal(raw, &cp); err != nil {
		return fmt.Errorf("commit: corrupt checkpoint: %w", err)
	}
	if s.now().After(cp.Deadline) {
		_ = os.Remove(s.path + ".checkpoint")
		return errors.New("commit: the checkpoint timed out and was rolled back")
	}
	if err := writeJSONAsYAML(s.path, cp.State); err != nil {
		return err
	}
	return os.Remove(s.path + ".checkpoint")
}

// rollback discards the checkpoint; with none it fails, as nmstatectl
// does.
func (s *simulator) rollback() error {
	err := os.Remove(s.path + ".checkpoint")
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("rollback: no checkpoint to roll back")
	}
	return err
}

// current returns the live state: an uncommitted checkpoint's while it
// has not timed out, else the committed one. A checkpoint that timed out
// is removed (nmstate rolls it back by itself).
func (s *simulator) current() (map[string]any, error) {
	raw, err := os.ReadFile(s.path + ".checkpoint")
	if errors.Is(err, os.ErrNotExist) {
		return s.load()
	}
	if err != nil {
		return nil, err
	}
	var cp checkpoint
	if err := yaml.Unmarshal(raw, &cp); err != nil {
		return nil, fmt.Errorf("corrupt checkpoint: %w", err)
	}
	if s.now().After(cp.Deadline) {
		_ = os.Remove(s.path + ".checkpoint")
		return s.load()
	}
	return cp.State, nil
}

// load returns the committed state.
func (s *simulator) load() (map[string]any, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		raw = newNodeState(s.path)
	} else if err != nil {
		return nil, err
	}
	var state map[string]any
	if err := yaml.Unmarshal(raw, &state); err != nil {
		return nil, fmt.Errorf("state file %s: %w", s.path, err)
	}
	if state == nil {
		state = map[string]any{}
	}
	return state, nil
}

// writeJSONAsYAML writes v as YAML atomically.
func writeJSONAsYAML(path string, v any) error {
	raw, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(raw); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
