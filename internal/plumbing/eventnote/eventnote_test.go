package eventnote

import (
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestFit(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		cut  bool
	}{
		{"short", "Freed 10.0.0.4", false},
		{"exactly the limit", strings.Repeat("a", MaxNote), false},
		{"one byte over", strings.Repeat("a", MaxNote+1), true},
		{"multi-byte characters across the cut", strings.Repeat("é", MaxNote), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Fit(tt.in)
			if len(got) > MaxNote {
				t.Fatalf("%d bytes, more than %d", len(got), MaxNote)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("not valid UTF-8: a character was cut in half")
			}
			if (got != tt.in) != tt.cut || strings.HasSuffix(got, cut) != tt.cut {
				t.Fatalf("cut %v, want %v: %q", got != tt.in, tt.cut, got)
			}
			if tt.cut && !strings.HasPrefix(tt.in, strings.TrimSuffix(got, cut)) {
				t.Fatalf("%q is not a prefix of the note", strings.TrimSuffix(got, cut))
			}
		})
	}
}

// recorded keeps what a recorder was given.
type recorded struct{ note string }

func (r *recorded) Eventf(_, _ runtime.Object, _, _, _, note string, args ...any) {
	if note != "%s" || len(args) != 1 {
		r.note = "not formatted once"
		return
	}
	r.note = args[0].(string)
}

func TestRecorderFormatsThenFits(t *testing.T) {
	var r recorded
	New(&r).Eventf(nil, nil, "Warning", "AddressStillCarried", "Reconcile", "%s and %d%%", strings.Repeat("x", 2000), 5)
	if len(r.note) != MaxNote || !strings.HasSuffix(r.note, cut) {
		t.Fatalf("note of %d bytes: %q", len(r.note), r.note[len(r.note)-120:])
	}
	New(&r).Eventf(nil, nil, "Normal", "Released", "Release", "took %s off", "10.0.0.4")
	if r.note != "took 10.0.0.4 off" {
		t.Fatalf("note %q", r.note)
	}
}
