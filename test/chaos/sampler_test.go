package chaos

import (
	"reflect"
	"testing"
)

// TestOnTwoNICs: the sampler's verdict, on networks made up here: an
// address on two existing nodes is reported, one on a removed node is not.
func TestOnTwoNICs(t *testing.T) {
	nets := map[string][]string{
		"node01": {"10.90.0.1", "fd00:90::1"},
		"node02": {"10.90.0.2", "fd00:90::1"},
		"node03": {"10.90.0.2"},
		"gone":   {"10.90.0.1"},
	}
	got := onTwoNICs(nets, []string{"node01", "node02", "node03"})
	want := []string{"10.90.0.2 on [node02 node03]", "fd00:90::1 on [node01 node02]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
