package capture

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		captures map[string]string
		refs     []Ref
		pools    []string
		errs     []string
	}{
		{name: "none", captures: nil},
		{
			name:     "two pools and an ordinary capture",
			captures: map[string]string{"b": "ippool.traffic-2.allocate", "a": " ippool.traffic-1.allocate ", "gw": `routes.running.destination=="0.0.0.0/0"`, "c": "ippool.traffic-1.allocate"},
			refs:     []Ref{{"a", "traffic-1"}, {"b", "traffic-2"}, {"c", "traffic-1"}},
			pools:    []string{"traffic-1", "traffic-2"},
		},
		{
			name:     "malformed ones are all reported",
			captures: map[string]string{"x": "ippool.traffic-1", "y": "ippool.Traffic.allocate", "z": "ippool..allocate", "w": "ippool.a.b.allocate", "ok": "ippool.p.allocate"},
			refs:     []Ref{{"ok", "p"}},
			errs:     []string{`capture "x" is "ippool.traffic-1"; write ippool.<pool>.allocate`, `capture "y"`, `capture "z"`, `capture "w"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.captures)
			if !reflect.DeepEqual(c.Refs, tt.refs) {
				t.Errorf("refs %v, want %v", c.Refs, tt.refs)
			}
			if tt.pools != nil && !reflect.DeepEqual(c.Pools(), tt.pools) {
				t.Errorf("pools %v, want %v", c.Pools(), tt.pools)
			}
			if len(tt.errs) == 0 && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if len(tt.errs) > 0 && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want ErrMalformed", err)
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

const currentState = `
routes:
  running:
  - destination: 0.0.0.0/0
    next-hop-address: 192.168.122.1
    next-hop-interface: eth0
    table-id: 254
  config: []
interfaces:
- name: eth0
  type: ethernet
  state: up
- name: eth1
  type: ethernet
  state: up
`

func addr(s string, prefix int) Address {
	return Address{IP: netip.MustParseAddr(s), PrefixLength: prefix}
}

// withNetwork adds a pool's gateway and DNS settings to a.
func withNetwork(a Address, gateway string, servers []string, search ...string) Address {
	a.Gateway = netip.MustParseAddr(gateway)
	for _, s := range servers {
		a.DNSServers = append(a.DNSServers, netip.MustParseAddr(s))
	}
	a.DNSSearch = search
	return a
}

func TestRender(t *testing.T) {
	tests := []struct {
		name      string
		captures  map[string]string
		allocated map[string]Address
		desired   string
		want      string
		captured  []string
		err       string
	}{
		{
			name:      "ipv4",
			captures:  map[string]string{"addr": "ippool.traffic-1.allocate"},
			allocated: map[string]Address{"addr": addr("10.10.10.8", 24)},
			desired: `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
`,
			want: `interfaces:
- ipv4:
    address:
    - ip: 10.10.10.8
      prefix-length: 24
    dhcp: false
    enabled: true
  name: eth1
  state: up
  type: ethernet
`,
			captured: []string{"addr"},
		},
		{
			name:      "gateway and dns",
			captures:  map[string]string{"addr": "ippool.traffic-1.allocate"},
			allocated: map[string]Address{"addr": withNetwork(addr("10.10.10.8", 24), "10.10.10.1", []string{"10.10.10.53", "10.10.10.54"}, "example.com")},
			desired: `interfaces:
- name: eth1
  ipv4:
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
routes:
  config:
  - destination: 0.0.0.0/0
    next-hop-address: "{{ capture.addr.gateway }}"
    next-hop-interface: eth1
dns-resolver:
  config:
    server: "{{ capture.addr.dns-servers }}"
    search: "{{ capture.addr.dns-search }}"
`,
			want: `dns-resolver:
  config:
    search:
    - example.com
    server:
    - 10.10.10.53
    - 10.10.10.54
interfaces:
- ipv4:
    address:
    - ip: 10.10.10.8
      prefix-length: 24
  name: eth1
routes:
  config:
  - destination: 0.0.0.0/0
    next-hop-address: 10.10.10.1
    next-hop-interface: eth1
`,
			captured: []string{"addr"},
		},
		{
			name:      "gateway of a pool without one",
			captures:  map[string]string{"addr": "ippool.traffic-1.allocate"},
			allocated: map[string]Address{"addr": addr("10.10.10.8", 24)},
			desired:   "routes:\n  config:\n  - next-hop-address: \"{{ capture.addr.gateway }}\"\n",
			err:       "the template reads {{ capture.addr.gateway }}, but NodeIPPool traffic-1 sets no spec.gateway (which a pool cannot gain once created)",
		},
		{
			name:      "ipv6",
			captures:  map[string]string{"v6": "ippool.traffic-6.allocate"},
			allocated: map[string]Address{"v6": addr("2001:4860:4860::20", 116)},
			desired: `interfaces:
- name: eth2
  ipv6:
    address:
    - ip: "{{ capture.v6.ip }}"
      prefix-length: "{{ capture.v6.prefix-length }}"
`,
			want: `interfaces:
- ipv6:
    address:
    - ip: 2001:4860:4860::20
      prefix-length: 116
  name: eth2
`,
			captured: []string{"v6"},
		},
		{
			name: "two pools and the default gateway interface",
			captures: map[string]string{
				"a":       "ippool.traffic-1.allocate",
				"b":       "ippool.traffic-2.allocate",
				"gw":      `routes.running.destination=="0.0.0.0/0"`,
				"gw-link": `interfaces.name==capture.gw.routes.running.0.next-hop-interface`,
			},
			allocated: map[string]Address{"a": addr("10.10.10.1", 24), "b": addr("10.10.11.9", 24)},
			desired: `interfaces:
- name: eth1
  ipv4:
    address:
    - ip: "{{ capture.a.ip }}"
      prefix-length: "{{ capture.a.prefix-length }}"
- name: eth2
  ipv4:
    address:
    - ip: "{{ capture.b.ip }}"
      prefix-length: "{{ capture.b.prefix-length }}"
- name: "{{ capture.gw-link.interfaces.0.name }}"
  state: up
`,
			want: `interfaces:
- ipv4:
    address:
    - ip: 10.10.10.1
      prefix-length: 24
  name: eth1
- ipv4:
    address:
    - ip: 10.10.11.9
      prefix-length: 24
  name: eth2
- name: eth0
  state: up
`,
			captured: []string{"a", "b", "gw", "gw-link"},
		},
		{
			name:     "an ippool capture without an address",
			captures: map[string]string{"addr": "ippool.traffic-1.allocate"},
			desired:  "interfaces: []\n",
			err:      `capture "addr" has no address from pool "traffic-1"`,
		},
		{
			name:      "a reference to an unknown capture",
			captures:  map[string]string{"addr": "ippool.traffic-1.allocate"},
			allocated: map[string]Address{"addr": addr("10.10.10.8", 24)},
			desired:   "interfaces:\n- name: \"{{ capture.nope.ip }}\"\n",
			err:       "render the desired state",
		},
		{
			name:      "bad nmpolicy syntax in an ordinary capture",
			captures:  map[string]string{"addr": "ippool.traffic-1.allocate", "bad": "interfaces.name=="},
			allocated: map[string]Address{"addr": addr("10.10.10.8", 24)},
			desired:   "interfaces: []\n",
			err:       "render the desired state",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.captures)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Render(Input{DesiredState: []byte(tt.desired), Captures: c, Allocated: tt.allocated, CurrentState: []byte(currentState)})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(out.DesiredState); got != tt.want {
				t.Errorf("desired state:\n%s\nwant:\n%s", got, tt.want)
			}
			assertPrefixLengthIsInteger(t, out.DesiredState)
			for _, name := range tt.captured {
				if _, ok := out.CapturedStates[name]; !ok {
					t.Errorf("capture %q missing from %v", name, out.CapturedStates)
				}
			}
			for name, want := range tt.allocated {
				got, ok := ParseState(out.CapturedStates[name])
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("captured state of %q = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// assertPrefixLengthIsInteger checks that nmstate receives prefix-length as
// a number, not the string "24".
func assertPrefixLengthIsInteger(t *testing.T, state []byte) {
	t.Helper()
	var doc struct {
		Interfaces []map[string]any `json:"interfaces"`
	}
	if err := yaml.Unmarshal(state, &doc); err != nil {
		t.Fatal(err)
	}
	for _, iface := range doc.Interfaces {
		for _, family := range []string{"ipv4", "ipv6"} {
			ip, ok := iface[family].(map[string]any)
			if !ok {
				continue
			}
			for _, a := range ip["address"].([]any) {
				if _, ok := a.(map[string]any)["prefix-length"].(float64); !ok {
					t.Errorf("prefix-length of %v is not a number", a)
				}
			}
		}
	}
}

func TestParseStateRoundTrip(t *testing.T) {
	a := addr("2001:db8::7", 64)
	got, ok := ParseState(a.State())
	if !ok || !reflect.DeepEqual(got, a) {
		t.Fatalf("ParseState(State()) = %v, %v", got, ok)
	}
	full := withNetwork(addr("10.0.0.7", 24), "10.0.0.1", []string{"10.0.0.53", "2001:db8::53"}, "example.com")
	if got, ok := ParseState(full.State()); !ok || !reflect.DeepEqual(got, full) {
		t.Fatalf("ParseState(State()) with gateway and DNS = %+v, %v", got, ok)
	}
	// As an enactment stores it: YAML.
	got, ok = ParseState([]byte("ip: 10.0.0.1\nprefix-length: 24\n"))
	if !ok || !reflect.DeepEqual(got, addr("10.0.0.1", 24)) {
		t.Fatalf("from YAML: %v, %v", got, ok)
	}
	for _, bad := range []string{"", "ip: nope\nprefix-length: 24", "ip: 10.0.0.1\nprefix-length: 33", "interfaces: []",
		"ip: 10.0.0.1\nprefix-length: 24\ngateway: router", "ip: 10.0.0.1\nprefix-length: 24\ndns-servers: [ns1]"} {
		if _, ok := ParseState([]byte(bad)); ok {
			t.Errorf("ParseState(%q) accepted", bad)
		}
	}
}

// TestRenderLeavesInputsAlone renders twice from the same inputs: nmpolicy
// deletes cached captures from the expressions it is given, and that must
// not reach the caller's (the policy's) map.
func TestRenderLeavesInputsAlone(t *testing.T) {
	policyCaptures := map[string]string{"addr": "ippool.p.allocate", "gw": `routes.running.destination=="0.0.0.0/0"`}
	c, err := Parse(policyCaptures)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{DesiredState: []byte("interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: \"{{ capture.addr.ip }}\"\n"),
		Captures: c, Allocated: map[string]Address{"addr": addr("10.0.0.1", 24)}, CurrentState: []byte(currentState)}
	for i := range 2 {
		if _, err := Render(in); err != nil {
			t.Fatalf("render %d: %v", i, err)
		}
	}
	if len(policyCaptures) != 2 || len(c.All) != 2 {
		t.Fatalf("inputs changed: policy %v, parsed %v", policyCaptures, c.All)
	}
}

func TestUsesPools(t *testing.T) {
	for _, tc := range []struct {
		captures map[string]string
		want     bool
	}{
		{nil, false},
		{map[string]string{"gw": `routes.running.destination=="0.0.0.0/0"`}, false},
		{map[string]string{"addr": "ippool.pool.allocate"}, true},
		{map[string]string{"addr": " ippool.Bad_Name.allocate"}, true}, // malformed still draws from pools
	} {
		if got := UsesPools(tc.captures); got != tc.want {
			t.Errorf("UsesPools(%v) = %v, want %v", tc.captures, got, tc.want)
		}
	}
}
