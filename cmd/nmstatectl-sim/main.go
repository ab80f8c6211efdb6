// Command nmstatectl-sim simulates nmstatectl for machines without
// NetworkManager (tests and local clusters). It keeps one node's state in a
// YAML file and understands the command line the handler uses:
//
//	nmstatectl-sim show --json
//	nmstatectl-sim apply [--no-commit] [--timeout SECONDS] FILE
//	nmstatectl-sim commit
//	nmstatectl-sim rollback
//
// The state file is $NMSTATECTL_SIM_STATE (default ./nmstate-sim.yaml); a
// missing file starts as a node with eth0 (holding the default route), eth1
// and eth2. apply merges interfaces by name (an interface with state: absent
// is removed) and replaces other top-level keys. With --no-commit the result
// waits in <state>.checkpoint until commit, or until rollback or the timeout
// discards it.
//
// Failures can be injected: each line "SUBCOMMAND: MESSAGE" of <state>.fail
// makes that subcommand print MESSAGE and exit 1.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// StateEnv names the environment variable holding the state file's path.
const StateEnv = "NMSTATECTL_SIM_STATE"

const defaultState = `interfaces:
- name: eth0
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: true
- name: eth1
  type: ethernet
  state: up
- name: eth2
  type: ethernet
  state: up
routes:
  running:
  - destination: 0.0.0.0/0
    next-hop-address: 192.168.122.1
    next-hop-interface: eth0
    table-id: 254
  config: []
`

func main() {
	path := os.Getenv(StateEnv)
	if path == "" {
		path = "nmstate-sim.yaml"
	}
	sim := &simulator{path: path, now: time.Now}
	if err := sim.run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type simulator struct {
	path string
	now  func() time.Time
}

type checkpoint struct {
	Deadline time.Time      `json:"deadline"`
	State    map[string]any `json:"state"`
}

func (s *simulator) run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: nmstatectl-sim show --json | apply [--no-commit] [--timeout N] FILE | commit | rollback")
	}
	if err := s.injectedFailure(args[0]); err != nil {
		return err
	}
	switch args[0] {
	case "show":
		return s.show(stdout)
	case "apply":
		return s.apply(args[1:])
	case "commit":
		return s.commit()
	case "rollback":
		return s.rollback()
	}
	return fmt.Errorf("unknown subcommand %q", args[0])
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

func (s *simulator) show(stdout io.Writer) error {
	state, err := s.load()
	if err != nil {
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
	if fs.NArg() != 1 {
		return errors.New("apply: want exactly one state file")
	}
	raw, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	var desired map[string]any
	if err := yaml.Unmarshal(raw, &desired); err != nil {
		return fmt.Errorf("apply: invalid desired state: %w", err)
	}
	state, err := s.load()
	if err != nil {
		return err
	}
	merged, err := merge(state, desired)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if !*noCommit {
		return writeJSONAsYAML(s.path, merged)
	}
	deadline := s.now().Add(time.Duration(*timeout) * time.Second)
	return writeJSONAsYAML(s.path+".checkpoint", checkpoint{Deadline: deadline, State: merged})
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

// rollback discards the checkpoint; with none it does nothing.
func (s *simulator) rollback() error {
	if err := os.Remove(s.path + ".checkpoint"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (s *simulator) load() (map[string]any, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		raw = []byte(defaultState)
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

// merge applies desired to state: interfaces merge by name, key by key; an
// interface with state "absent" is removed; other top-level keys replace.
func merge(state, desired map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range state {
		out[k] = v
	}
	for k, v := range desired {
		if k != "interfaces" {
			out[k] = v
			continue
		}
		ifaces, err := mergeInterfaces(state["interfaces"], v)
		if err != nil {
			return nil, err
		}
		out[k] = ifaces
	}
	return out, nil
}

func mergeInterfaces(current, desired any) ([]any, error) {
	cur, _ := current.([]any)
	want, ok := desired.([]any)
	if !ok {
		return nil, errors.New("interfaces must be a list")
	}
	out := append([]any(nil), cur...)
	for _, d := range want {
		di, ok := d.(map[string]any)
		name, _ := di["name"].(string)
		if !ok || name == "" {
			return nil, fmt.Errorf("interface %v has no name", d)
		}
		i := indexOf(out, name)
		switch {
		case di["state"] == "absent" && i >= 0:
			out = append(out[:i], out[i+1:]...)
		case di["state"] == "absent":
		case i >= 0:
			merged := map[string]any{}
			for k, v := range out[i].(map[string]any) {
				merged[k] = v
			}
			for k, v := range di {
				merged[k] = v
			}
			out[i] = merged
		default:
			out = append(out, di)
		}
	}
	return out, nil
}

func indexOf(ifaces []any, name string) int {
	for i, x := range ifaces {
		if m, ok := x.(map[string]any); ok && m["name"] == name {
			return i
		}
	}
	return -1
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
