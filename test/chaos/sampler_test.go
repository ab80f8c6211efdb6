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

// TestClaimedAndCarried: an address one IPAddress held before and after
// the networks were read, and a present node carried, is reported; one
// whose IPAddress changed or went meanwhile, or that only a removed node
// carries, is not; two IPAddresses of one address are.
func TestClaimedAndCarried(t *testing.T) {
	nets := map[string][]string{"node01": {"10.90.0.1", "10.90.0.2", "10.90.0.3"}, "gone": {"10.90.0.4"}}
	before := map[string]string{
		"10.90.0.1": "ns/a@1", "10.90.0.2": "ns/b@2", "10.90.0.3": "ns/c@3", "10.90.0.4": "ns/d@4",
		"10.90.0.5": "ns/e@5", "10.90.0.5#2": "ns/f@6",
	}
	after := map[string]string{
		"10.90.0.1": "ns/a@1", "10.90.0.2": "ns/b@7", "10.90.0.4": "ns/d@4",
		"10.90.0.5": "ns/e@5", "10.90.0.5#2": "ns/f@6",
	}
	got := claimedAndCarried(before, after, nets, []string{"node01"})
	want := []string{"10.90.0.1 held by IPAddress ns/a@1 and on node node01", "10.90.0.5 held by two IPAddresses (ns/e@5 and ns/f@6)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
