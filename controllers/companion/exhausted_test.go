package companion

import (
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/assign"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestExhaustionSaysWhy: a pooled policy's exhaustion message adds, after
// "n of m allocated", the free addresses the chooser could not hand out,
// and nothing for a plain full pool.
func TestExhaustionSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		why  *assign.FullError
		want string
	}{
		{nil, ""},
		{&assign.FullError{Err: ippool.ErrFull}, ""},
		{&assign.FullError{Err: ippool.ErrFull, Carried: 2}, "; 2 more are carried by nodes' networks and recorded by no holder"},
		{&assign.FullError{Err: ippool.ErrFull, Reserved: 1, Carried: 1},
			"; 1 more are reserved for other nodes; 1 more are carried by nodes' networks and recorded by no holder"},
	} {
		if got := (&taking{fullWhy: tc.why}).whyMore(); got != tc.want {
			t.Errorf("whyMore(%v) = %q, want %q", tc.why, got, tc.want)
		}
	}
}
