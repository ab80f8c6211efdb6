package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/periods"
)

// Flags that do not go together are refused at start-up, with what to do.
func TestOptionsCheck(t *testing.T) {
	valid := options{mode: modeHandler, gracePeriod: periods.DefaultGrace, quarantinePeriod: periods.DefaultQuarantine,
		departureHold: periods.DefaultDepartureHold}
	companion := valid
	companion.mode, companion.requireAdmission = modeCompanion, true
	// The default hold is capped silently by a shorter quarantine period,
	// and a hold given up to that period is accepted.
	shortPeriod := valid
	shortPeriod.quarantinePeriod = periods.DefaultDepartureHold / 2
	holdAtPeriod := valid
	holdAtPeriod.departureHold, holdAtPeriod.departureHoldSet = valid.quarantinePeriod, true
	for _, o := range []options{valid, companion, shortPeriod, holdAtPeriod} {
		if err := o.check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for want, o := range map[string]options{
		"--mode=companion":  func() options { o := valid; o.requireAdmission = true; return o }(),
		`--mode "handlers"`: func() options { o := valid; o.mode = "handlers"; return o }(),
		"--departure-hold 10m0s is longer than --quarantine-period 5m0s, which caps it: set it to 5m0s or less": func() options {
			o := valid
			o.departureHold, o.departureHoldSet = 10*time.Minute, true
			return o
		}(),
	} {
		if err := o.check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error saying %s", o, err, want)
		}
	}
}

// TestGiven: a hold given on the command line counts as set, even at its
// default value, so that the check above sees it; one left out does not.
func TestGiven(t *testing.T) {
	for args, want := range map[string]bool{"": false, "--departure-hold=30s": true, "--gc-grace-period=1m": false} {
		fs := flag.NewFlagSet("pool-controller", flag.ContinueOnError)
		fs.Duration("departure-hold", periods.DefaultDepartureHold, "")
		fs.Duration("gc-grace-period", periods.DefaultGrace, "")
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		if got := given(fs, "departure-hold"); got != want {
			t.Errorf("%q: given = %t, want %t", args, got, want)
		}
	}
}
