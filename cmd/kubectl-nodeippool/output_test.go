package main

import (
	"bytes"
	"strings"
	"testing"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
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

// TestShowNamesThePolicyOfEveryKindOfHolder: show's POLICY column names
// the policy of an address's holder whether the address is held,
// quarantined or kept: an enactment's policy (its name after its node's,
// dots and all), a pooled policy as pnncp/<name>, a claim by its title;
// never a holder's whole name.
func TestShowNamesThePolicyOfEveryKindOfHolder(t *testing.T) {
	pooled := holder.ForPolicyNode("storage", "n2.lab").String()
	claim := holder.ForClaim("tenant", "m-0").String()
	d := poolDetail{Addresses: []addressRow{
		{Offset: "1", IP: "10.0.0.2", State: "allocated", Holders: []poolstatus.Owner{{Holder: holder.ForEnactment("n1.lab.web"), Node: "n1.lab", Policy: "web"}}},
		{Offset: "2", IP: "10.0.0.3", State: "quarantined", Quarantine: &ippoolv1.QuarantinedAddress{IP: "10.0.0.3", Holder: "n1.lab.db.v2", Node: "n1.lab"}},
		{Offset: "3", IP: "10.0.0.4", State: "quarantined", Quarantine: &ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Holder: pooled, Node: "n2.lab"}},
		{Offset: "4", IP: "10.0.0.5", State: "quarantined", Quarantine: &ippoolv1.QuarantinedAddress{IP: "10.0.0.5", Holder: claim}},
		{Offset: "5", IP: "10.0.0.6", State: "kept", KeptFor: &ippoolv1.KeptAddress{IP: "10.0.0.6", Holder: pooled, Node: "n2.lab", Capture: "a"}},
	}}
	var b bytes.Buffer
	if err := (printer{w: &b}).detail(d); err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{}
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasPrefix(f[1], "10.0.0.") {
			policies[f[1]] = f[5]
		}
	}
	for ip, want := range map[string]string{"10.0.0.2": "web", "10.0.0.3": "db.v2", "10.0.0.4": "pnncp/storage",
		"10.0.0.5": "IPAddressClaim", "10.0.0.6": "pnncp/storage"} {
		if policies[ip] != want {
			t.Errorf("POLICY of %s is %q, want %q:\n%s", ip, policies[ip], want, b.String())
		}
	}
}
