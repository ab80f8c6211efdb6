package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nmstate/nmpolicy/nmpolicy"
	nmpolicytypes "github.com/nmstate/nmpolicy/nmpolicy/types"
	"sigs.k8s.io/yaml"
)

// policyFile is what "nmstatectl policy" reads: a policy's captures and
// its desired state template.
type policyFile struct {
	Capture      map[string]string `json:"capture,omitempty"`
	DesiredState json.RawMessage   `json:"desiredState,omitempty"`
}

// capturedFile is an entry of the files of --captured and
// --output-captured: a resolved capture and when it was resolved.
type capturedFile struct {
	State    json.RawMessage `json:"state,omitempty"`
	MetaInfo struct {
		Version string    `json:"version"`
		Time    time.Time `json:"time"`
	} `json:"metaInfo"`
}

// policy renders a policy with nmpolicy, as "nmstatectl policy" does: the
// captures are resolved against the state of --current (the node's live
// state without it), those of --captured are taken as they are, and the
// desired state is printed (JSON with --json, YAML without; nothing when
// it is empty). --output-captured gets every capture, resolved or taken,
// and "{}" when there are none.
func (s *simulator) policy(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("policy", flag.ContinueOnError)
	currentFile := fs.String("current", "", "the current state to resolve captures against (default: the live state)")
	asJSON := fs.Bool("json", false, "print JSON instead of YAML")
	cachedFile := fs.String("captured", "", "captures resolved before, taken as they are")
	outputFile := fs.String("output-captured", "", "where to write every capture")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("policy: want one policy file")
	}
	raw, err := s.readInput(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	var p policyFile
	if err := yaml.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("policy: invalid policy file: %w", err)
	}
	current, err := s.policyCurrentState(*currentFile)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	cache, err := readCaptured(*cachedFile)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	generated, err := nmpolicy.GenerateState(
		nmpolicytypes.PolicySpec{Capture: p.Capture, DesiredState: nmpolicytypes.NMState(p.DesiredState)}, current, cache)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if *outputFile != "" {
		if err := writeCaptured(*outputFile, generated.Cache); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
	}
	if len(generated.DesiredState) == 0 {
		return nil
	}
	out := []byte(generated.DesiredState)
	if *asJSON {
		if out, err = yaml.YAMLToJSON(out); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		out = append(out, '\n')
	}
	_, err = stdout.Write(out)
	return err
}

// policyCurrentState reads --current, or the live state without it.
func (s *simulator) policyCurrentState(name string) ([]byte, error) {
	if name != "" {
		return os.ReadFile(name)
	}
	state, err := s.current()
	if err != nil {
		return nil, err
	}
	return json.Marshal(state)
}

// readCaptured reads the captures of --captured; none without it or when
// the file is empty.
func readCaptured(name string) (nmpolicytypes.CachedState, error) {
	cache := nmpolicytypes.CachedState{Capture: map[string]nmpolicytypes.CaptureState{}}
	if name == "" {
		return cache, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil || len(raw) == 0 {
		return cache, err
	}
	var entries map[string]capturedFile
	if err := yaml.Unmarshal(raw, &entries); err != nil {
		return cache, fmt.Errorf("captured file %s: %w", name, err)
	}
	for captureName, e := range entries {
		cache.Capture[captureName] = nmpolicytypes.CaptureState{State: nmpolicytypes.NMState(e.State),
			MetaInfo: nmpolicytypes.MetaInfo{Version: e.MetaInfo.Version, TimeStamp: e.MetaInfo.Time}}
	}
	return cache, nil
}

// writeCaptured writes every capture as nmstatectl does: by name, the
// captured state and its meta information.
func writeCaptured(name string, cache nmpolicytypes.CachedState) error {
	entries := map[string]capturedFile{}
	for captureName, c := range cache.Capture {
		var e capturedFile
		state, err := yaml.YAMLToJSON(c.State)
		if err != nil {
			return err
		}
		if string(state) != "null" {
			e.State = state
		}
		e.MetaInfo.Version, e.MetaInfo.Time = c.MetaInfo.Version, c.MetaInfo.TimeStamp.UTC()
		if e.MetaInfo.Version == "" {
			e.MetaInfo.Version = "0"
		}
		entries[captureName] = e
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return os.WriteFile(name, raw, 0o600)
}

// statistic answers "nmstatectl st -": the statistics of the desired
// state on standard input. kubernetes-nmstate reads only its features, for
// its metrics; the simulator reports the top-level sections the state
// sets (nmstate names finer features, such as "static_dns").
func (s *simulator) statistic(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("st: want one state file, or - for standard input")
	}
	raw, err := s.readInput(args[0])
	if err != nil {
		return fmt.Errorf("st: %w", err)
	}
	var state map[string]any
	if err := yaml.Unmarshal(raw, &state); err != nil {
		return fmt.Errorf("st: invalid state: %w", err)
	}
	features := []string{}
	for _, key := range []string{"interfaces", "routes", "route-rules", "dns-resolver", "ovs-db", "ovn"} {
		if _, ok := state[key]; ok {
			features = append(features, key)
		}
	}
	return json.NewEncoder(stdout).Encode(map[string]any{"features": features})
}
