package poolcontroller

import (
	"os"
	"path/filepath"
	"testing"
)

// TestKnowsFlag: a flag is known when the program's usage lists it, so
// that a pool controller of an earlier version is not started with a flag
// it would refuse.
func TestKnowsFlag(t *testing.T) {
	dir := t.TempDir()
	program := func(name, usage string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\nprintf '%s' '"+usage+"' >&2\nexit 2\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := program("now", "Usage of pool-controller:\n  -gc-grace-period duration\n  -hold-carried-addresses\n    \tquarantine ...\n")
	earlier := program("earlier", "Usage of pool-controller:\n  -gc-grace-period duration\n  -hold-carried-addresses-later\n")
	if !knowsFlag(now, holdCarried) || !knowsFlag(earlier, "gc-grace-period") {
		t.Error("a flag the usage lists is not known")
	}
	if knowsFlag(earlier, holdCarried) || knowsFlag(filepath.Join(dir, "missing"), holdCarried) {
		t.Error("a flag the usage does not list, or a missing program, is known")
	}
}
