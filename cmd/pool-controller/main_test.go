package main

import (
	"strings"
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
)

// Flags that do not go together are refused at start-up, with what to do.
func TestOptionsCheck(t *testing.T) {
	valid := options{mode: modeHandler, gracePeriod: pool.DefaultGracePeriod, quarantinePeriod: pool.DefaultQuarantinePeriod,
		departureHold: pool.DefaultDepartureHold}
	companion := valid
	companion.mode, companion.requireAdmission = modeCompanion, true
	for _, o := range []options{valid, companion} {
		if err := o.check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for want, o := range map[string]options{
		"--mode=companion":  func() options { o := valid; o.requireAdmission = true; return o }(),
		`--mode "handlers"`: func() options { o := valid; o.mode = "handlers"; return o }(),
	} {
		if err := o.check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error saying %s", o, err, want)
		}
	}
}
