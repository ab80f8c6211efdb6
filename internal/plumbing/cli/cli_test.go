package cli

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args        []string
		least, most int
		pos         []string
		verbose     bool
		usage       bool
	}{
		{args: []string{"a", "-v", "b"}, least: 2, most: 2, pos: []string{"a", "b"}, verbose: true},
		{args: []string{"-v", "a"}, least: 0, most: -1, pos: []string{"a"}, verbose: true},
		{args: nil, least: 0, most: 0},
		{args: []string{"a"}, least: 0, most: 0, usage: true},
		{args: []string{}, least: 1, most: 1, usage: true},
		{args: []string{"--nope"}, least: 0, most: 0, usage: true},
	} {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		v := fs.Bool("v", false, "")
		pos, err := Parse(fs, tt.args, tt.least, tt.most)
		if tt.usage != errors.Is(err, ErrUsage) || (!tt.usage && err != nil) {
			t.Errorf("%q: error %v, usage error wanted: %v", tt.args, err, tt.usage)
			continue
		}
		if !tt.usage && (!reflect.DeepEqual(pos, tt.pos) || *v != tt.verbose) {
			t.Errorf("%q: positional %q verbose %v, want %q %v", tt.args, pos, *v, tt.pos, tt.verbose)
		}
	}
}
