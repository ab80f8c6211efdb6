package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolstatus"
)

// TestDecodedNamesEveryKindOfHolder: decode names each holder as its kind
// reads, in words and in JSON, where the holder field holds the name
// pool entries give it.
func TestDecodedNamesEveryKindOfHolder(t *testing.T) {
	row := addressRow{Offset: "1", IP: "10.0.0.2", State: stateCollision, Holders: []poolstatus.Owner{
		{Holder: holder.ForEnactment("n1.p"), Pool: "p", Node: "n1", Policy: "p", Capture: "a", Interface: "eth1"},
		{Holder: holder.ForPolicyNode("storage", "n2"), Pool: "p", Node: "n2", Policy: "storage", Capture: "a"},
		{Holder: holder.ForClaim("tenant", "m-0"), Pool: "p"},
		{Holder: holder.ForIPAddress("tenant", "squat"), Pool: "p", Unrecognized: true},
	}}
	var b bytes.Buffer
	if err := (printer{w: &b}).decoded("p", row); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"node n1 on eth1 (enactment n1.p, policy p, capture a)",
		"node n2 on - (PooledNodeNetworkConfigurationPolicy storage, capture a)",
		"IPAddressClaim tenant/m-0 (its IPAddress tenant/m-0)",
		"IPAddress tenant/squat (not made by this provider for a claim)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("decode says %q, want it to hold %q", b.String(), want)
		}
	}
	b.Reset()
	if err := (printer{w: &b, format: "json"}).decoded("p", row); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"holder": "n1.p"`, `"holder": "PooledNodeNetworkConfigurationPolicy/storage/n2"`,
		`"holder": "IPAddressClaim/tenant/m-0"`, `"holder": "IPAddress/tenant/squat"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("decode -o json says %s, want it to hold %s", b.String(), want)
		}
	}
}
