package probe

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults of a Set: kubernetes-nmstate's.
const (
	DefaultTimeout  = 120 * time.Second
	DefaultInterval = time.Second
	// DefaultBeforeTimeout bounds the check of the conditional probes
	// before an apply: a gateway that does not answer at once is taken as
	// one that does not answer pings.
	DefaultBeforeTimeout = 2 * time.Second
)

// Probe is one check of the node.
type Probe struct {
	// Name is how messages and flags name it.
	Name string
	// Check returns nil when the node passes, else what it saw.
	Check func(ctx context.Context) error
	// Conditional probes run after an apply only when they passed
	// before it.
	Conditional bool
}

// Set runs probes around an apply. The zero durations take the defaults.
type Set struct {
	Probes []Probe
	// Timeout is how long each probe is polled after an apply.
	Timeout time.Duration
	// Interval is the time between two polls.
	Interval time.Duration
	// BeforeTimeout bounds the conditional probes' check before an apply.
	BeforeTimeout time.Duration
}

// Failure is a probe that did not pass in time.
type Failure struct {
	Probe string
	Err   error
}

func (f *Failure) Error() string {
	return fmt.Sprintf("probe %s failed: %v", f.Probe, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }

// Before returns the probes to run after the apply about to be made: every
// unconditional probe and the conditional ones that pass now, each checked
// once within BeforeTimeout, all at the same time.
func (s Set) Before(ctx context.Context) []Probe {
	ctx, cancel := context.WithTimeout(ctx, or(s.BeforeTimeout, DefaultBeforeTimeout))
	defer cancel()
	passed := make([]chan bool, len(s.Probes))
	for i, p := range s.Probes {
		passed[i] = make(chan bool, 1)
		if !p.Conditional {
			passed[i] <- true
			continue
		}
		go func() { passed[i] <- p.Check(ctx) == nil }()
	}
	var out []Probe
	for i, p := range s.Probes {
		if <-passed[i] {
			out = append(out, p)
		}
	}
	return out
}

// After polls each of probes, in order, every Interval until it passes or
// Timeout has passed since its first poll, and returns the first that did
// not pass as a *Failure with what it saw last. Each check has Interval,
// and at least checkTimeout, to answer. It returns ctx's error if ctx
// ends first.
func (s Set) After(ctx context.Context, probes []Probe) error {
	interval, timeout := or(s.Interval, DefaultInterval), or(s.Timeout, DefaultTimeout)
	for _, p := range probes {
		deadline := time.Now().Add(timeout)
		for {
			cctx, cancel := context.WithTimeout(ctx, max(interval, checkTimeout))
			err := p.Check(cctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !time.Now().Before(deadline) {
				return &Failure{Probe: p.Name, Err: err}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(interval):
			}
		}
	}
	return nil
}

// checkTimeout is the least time one check of a probe is given.
const checkTimeout = 5 * time.Second

// Select returns the probes named, in the order of all; an unknown name
// is an error that lists the known ones.
func Select(all []Probe, names []string) ([]Probe, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[strings.TrimSpace(n)] = true
	}
	var out []Probe
	for _, p := range all {
		if want[p.Name] {
			out = append(out, p)
			delete(want, p.Name)
		}
	}
	delete(want, "")
	if len(want) > 0 {
		return nil, fmt.Errorf("unknown probes %s; known: %s", strings.Join(slices.Sorted(maps.Keys(want)), ", "),
			strings.Join(Names(all), ", "))
	}
	return out, nil
}

// Names returns the probes' names.
func Names(probes []Probe) []string {
	out := make([]string, len(probes))
	for i, p := range probes {
		out[i] = p.Name
	}
	return out
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
