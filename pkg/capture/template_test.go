package capture

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

const bondTemplate = `
interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    address:
    - ip: "{{ capture.a.ip }}"
      prefix-length: "{{ capture.a.prefix-length }}"
- name: "{{ capture.primary.interfaces.0.name }}"
  type: ethernet
  ipv6:
    enabled: true
    address:
    - ip: "{{capture.b.ip}}"
      prefix-length: 64
routes:
  config:
  - destination: 0.0.0.0/0
    next-hop-address: "{{ capture.a.gateway }}"
    next-hop-interface: eth1
dns-resolver:
  config:
    server: "{{ capture.a.dns-servers }}"
`

func TestUses(t *testing.T) {
	want := []Use{
		{Capture: "a", Path: "ip", Interface: "eth1"},
		{Capture: "a", Path: "prefix-length", Interface: "eth1"},
		{Capture: "b", Path: "ip"},
		{Capture: "primary", Path: "interfaces.0.name"},
		{Capture: "a", Path: "dns-servers"},
		{Capture: "a", Path: "gateway"},
	}
	if got := Uses([]byte(bondTemplate)); !reflect.DeepEqual(got, want) {
		t.Errorf("Uses = %+v, want %+v", got, want)
	}
	if got := Interfaces([]byte(bondTemplate), "a"); !reflect.DeepEqual(got, []string{"eth1"}) {
		t.Errorf("Interfaces(a) = %v", got)
	}
	// b's interface is named by a capture: not known before rendering.
	if got := Interfaces([]byte(bondTemplate), "b"); got != nil {
		t.Errorf("Interfaces(b) = %v, want none", got)
	}
	if got := Uses([]byte("not: [yaml")); got != nil {
		t.Errorf("Uses of a broken template = %v", got)
	}
}

func TestCheckTemplate(t *testing.T) {
	c, err := Parse(map[string]string{"a": "ippool.p.allocate", "b": "ippool.q.allocate", "primary": "interfaces.name==\"eth0\""})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckTemplate([]byte(bondTemplate)); err != nil {
		t.Errorf("a template that reads only what captures give: %v", err)
	}
	bad := `
interfaces:
- name: eth1
  ipv4:
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.a.prefix }}"
    - ip: "{{ capture.a.ip }}"
      prefix-length: "{{ capture.a.prefix }}"
`
	err = c.CheckTemplate([]byte(bad))
	if !errors.Is(err, ErrTemplate) {
		t.Fatalf("err = %v, want ErrTemplate", err)
	}
	for _, want := range []string{
		`the template reads {{ capture.addr.ip }}, but the policy defines no capture "addr" (spec.capture has a, b, primary)`,
		`the template reads {{ capture.a.prefix }}, but capture "a" (ippool.p.allocate) has no field "prefix": an ippool capture gives ip, prefix-length, gateway, dns-servers, dns-search`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "capture.a.prefix"); n != 1 {
		t.Errorf("a reference repeated is reported %d times, want once", n)
	}
}

func TestNeedsAndMissing(t *testing.T) {
	c, err := Parse(map[string]string{"a": "ippool.p.allocate", "b": "ippool.q.allocate"})
	if err != nil {
		t.Fatal(err)
	}
	needs := Needs([]byte(bondTemplate), c.RefsOf("p"))
	if want := map[string][]string{"a": {FieldDNSServers, FieldGateway}}; !reflect.DeepEqual(needs, want) {
		t.Fatalf("Needs(p) = %v, want %v", needs, want)
	}
	if got := Needs([]byte(bondTemplate), c.RefsOf("q")); len(got) != 0 {
		t.Errorf("Needs(q) = %v, want nothing", got)
	}
	err = Missing(needs, "p", Address{IP: netip.MustParseAddr("10.0.0.5"), PrefixLength: 24})
	if !errors.Is(err, ErrTemplate) {
		t.Fatalf("err = %v, want ErrTemplate", err)
	}
	for _, want := range []string{
		"the template reads {{ capture.a.gateway }}, but NodeIPPool p sets no spec.gateway (which a pool cannot gain once created): draw the capture from a pool that sets spec.gateway, or remove the reference from the policy",
		"the template reads {{ capture.a.dns-servers }}, but NodeIPPool p sets no spec.dns.servers (which",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	full := Address{IP: netip.MustParseAddr("10.0.0.5"), PrefixLength: 24, Gateway: netip.MustParseAddr("10.0.0.1"),
		DNSServers: []netip.Addr{netip.MustParseAddr("10.0.0.53")}}
	if err := Missing(needs, "p", full); err != nil {
		t.Errorf("a pool that sets both: %v", err)
	}
}
