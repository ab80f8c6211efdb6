package periods

import (
	"strings"
	"testing"
	"time"
)

// TestCheck: periods that would break the protocol are refused at
// start-up with the flag to fix; a departure hold of 0 is allowed.
func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		grace, quarantine, hold time.Duration
		want                    string
	}{
		{time.Minute, time.Minute, 0, ""},
		{time.Minute, time.Minute, time.Hour, ""},
		{time.Millisecond, time.Minute, 0, "--gc-grace-period 1ms is too short"},
		{time.Minute, 0, 0, "--quarantine-period 0s is too short"},
		{time.Minute, time.Minute, -time.Second, "--departure-hold -1s is negative"},
	} {
		err := Check(tt.grace, tt.quarantine, tt.hold)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%s, %s, %s): %v", tt.grace, tt.quarantine, tt.hold, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("Check(%s, %s, %s) = %v, want %q...", tt.grace, tt.quarantine, tt.hold, err, tt.want)
		}
	}
}
