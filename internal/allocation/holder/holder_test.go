package holder

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestRoundTrip: every kind's name parses back to the holder that wrote
// it, node names with dots included; what no other kind names is an
// enactment's name, prefixed names without their second part too.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		ref   Ref
		name  string
		title string
	}{
		{ForEnactment("w1.example.com.static-ip"), "w1.example.com.static-ip", "enactment w1.example.com.static-ip"},
		{ForPolicyNode("storage", "w1.example.com"), "PooledNodeNetworkConfigurationPolicy/storage/w1.example.com",
			"node w1.example.com (PooledNodeNetworkConfigurationPolicy storage)"},
		{ForClaim("tenant", "m-0"), "IPAddressClaim/tenant/m-0", "IPAddressClaim tenant/m-0"},
		{ForIPAddress("tenant", "squat"), "IPAddress/tenant/squat", "IPAddress tenant/squat (not made by this provider for a claim)"},
	} {
		if got := tc.ref.String(); got != tc.name {
			t.Errorf("%+v names itself %q, want %q", tc.ref, got, tc.name)
		}
		if got := Parse(tc.name); got != tc.ref {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.name, got, tc.ref)
		}
		if got := tc.ref.Title(); got != tc.title {
			t.Errorf("%+v titled %q, want %q", tc.ref, got, tc.title)
		}
		if got, want := tc.ref.Foreign(), tc.ref.Kind != Enactment; got != want {
			t.Errorf("%+v foreign %v", tc.ref, got)
		}
	}
	for _, name := range []string{"IPAddressClaim/only", "PooledNodeNetworkConfigurationPolicy/", "IPAddress", ""} {
		if got := Parse(name); got != ForEnactment(name) {
			t.Errorf("Parse(%q) = %+v, want an enactment's name", name, got)
		}
	}
}

// TestEnactmentNode: an enactment's holder knows its node, the part of
// "<node>.<policy>" before the last dot, and a holder's name goes through
// JSON as the string entries hold.
func TestEnactmentNode(t *testing.T) {
	for name, node := range map[string]string{"w1.example.com.static-ip": "w1.example.com", "n1.p": "n1", "nodot": "", ".p": ""} {
		if got := ForEnactment(name).Node; got != node {
			t.Errorf("node of enactment %q = %q, want %q", name, got, node)
		}
	}
	for _, r := range []Ref{ForEnactment("n1.p"), ForPolicyNode("storage", "w1.example.com"), ForClaim("t", "m-0")} {
		b, err := json.Marshal(r)
		if err != nil || string(b) != strconv.Quote(r.String()) {
			t.Errorf("%+v marshals to %s, %v", r, b, err)
		}
		var back Ref
		if err := json.Unmarshal(b, &back); err != nil || back != r {
			t.Errorf("%s unmarshals to %+v, %v", b, back, err)
		}
	}
}
