package capture

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestLiteral(t *testing.T) {
	addr := Address{IP: netip.MustParseAddr("10.10.10.5"), PrefixLength: 24, Gateway: netip.MustParseAddr("10.10.10.254"),
		DNSServers: []netip.Addr{netip.MustParseAddr("10.10.10.53")}, DNSSearch: []string{"example.com"}}
	template := `interfaces:
- name: eth1
  type: ethernet
  state: up
  description: "address {{ capture.addr.ip }}/{{ capture.addr.prefix-length }} via {{capture.gw.routes.running.0.next-hop-address}}"
  ipv4:
    enabled: true
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
routes:
  config:
  - destination: 0.0.0.0/0
    next-hop-address: "{{ capture.addr.gateway }}"
    next-hop-interface: eth1
  - destination: 198.51.100.0/24
    next-hop-address: "{{ capture.gw.routes.running.0.next-hop-address }}"
dns-resolver:
  config:
    server: "{{ capture.addr.dns-servers }}"
    search:
    - "{{ capture.addr.dns-search.0 }}"
`
	out, err := Literal([]byte(template), map[string]Address{"addr": addr})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	iface := got["interfaces"].([]any)[0].(map[string]any)
	if d := iface["description"]; d != "address 10.10.10.5/24 via {{capture.gw.routes.running.0.next-hop-address}}" {
		t.Errorf("description %q", d)
	}
	a := iface["ipv4"].(map[string]any)["address"].([]any)[0].(map[string]any)
	if a["ip"] != "10.10.10.5" || a["prefix-length"] != float64(24) {
		t.Errorf("address %v: want the ip as text and the prefix length as a number", a)
	}
	routes := got["routes"].(map[string]any)["config"].([]any)
	if hop := routes[0].(map[string]any)["next-hop-address"]; hop != "10.10.10.254" {
		t.Errorf("gateway %v", hop)
	}
	if hop := routes[1].(map[string]any)["next-hop-address"]; hop != "{{ capture.gw.routes.running.0.next-hop-address }}" {
		t.Errorf("an ordinary capture's reference was changed: %v", hop)
	}
	dns := got["dns-resolver"].(map[string]any)["config"].(map[string]any)
	if s := dns["server"].([]any); len(s) != 1 || s[0] != "10.10.10.53" {
		t.Errorf("dns servers %v: want the list", s)
	}
	if s := dns["search"].([]any); s[0] != "example.com" {
		t.Errorf("dns search %v", s)
	}
}

func TestLiteralRefusals(t *testing.T) {
	bare := Address{IP: netip.MustParseAddr("10.10.10.5"), PrefixLength: 24}
	tests := []struct{ name, template, want string }{
		{"a gateway the pool does not set", `{routes: {config: [{next-hop-address: "{{ capture.addr.gateway }}"}]}}`, `has no "gateway"`},
		{"a list inside text", `{description: "dns {{ capture.addr.dns-servers }}"}`, "has no"},
		{"an index past the end", `{x: "{{ capture.addr.ip.0 }}"}`, "goes past a single value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Literal([]byte(tt.template), map[string]Address{"addr": bare})
			if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want ErrTemplate saying %q", err, tt.want)
			}
		})
	}
	withDNS := bare
	withDNS.DNSServers = []netip.Addr{netip.MustParseAddr("10.0.0.53")}
	if _, err := Literal([]byte(`{description: "dns {{ capture.addr.dns-servers }}"}`), map[string]Address{"addr": withDNS}); err == nil ||
		!strings.Contains(err.Error(), "make the reference the whole value") {
		t.Errorf("a list inside text: %v", err)
	}
}

func TestPlain(t *testing.T) {
	c, err := Parse(map[string]string{"addr": "ippool.p.allocate", "gw": `routes.running.destination=="0.0.0.0/0"`})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Plain()
	if err != nil || len(plain) != 1 || plain["gw"] == "" {
		t.Errorf("Plain() = %v, %v; want gw alone", plain, err)
	}
	c, _ = Parse(map[string]string{"addr": "ippool.p.allocate", "iface": `interfaces.name==capture.addr.ip`, "other": "capture.addrx.ip"})
	if _, err := c.Plain(); !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), `capture "iface"`) ||
		strings.Contains(err.Error(), `capture "other"`) {
		t.Errorf("a capture reading the ippool one: %v", err)
	}
	none, _ := Parse(map[string]string{"addr": "ippool.p.allocate"})
	if plain, err := none.Plain(); plain != nil || err != nil {
		t.Errorf("only ippool captures: %v, %v; want nil", plain, err)
	}
}
