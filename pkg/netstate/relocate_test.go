package netstate

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// movedCurrent is a node whose pooled address 10.0.0.5 is on eth2 beside
// an address of its own, with a DHCP interface that also carries it.
const movedCurrent = `
interfaces:
- name: eth0
  type: ethernet
  state: up
  ipv4: {enabled: true, dhcp: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}
- name: eth2
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address: [{ip: 10.0.0.5, prefix-length: 24}, {ip: 192.0.2.9, prefix-length: 24}]
- name: eth3
  type: ethernet
  state: up
`

// TestOnlyWhereDesired: a pooled address a desired state puts on one
// interface is taken off every other interface the node carries it on,
// in the same apply, keeping those interfaces' other addresses; what the
// desired state says of an interface itself is left to it; a state that
// moves nothing is returned as given.
func TestOnlyWhereDesired(t *testing.T) {
	pooled := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	for _, tt := range []struct {
		name    string
		desired string
		want    string // as YAML; "" for desired unchanged
		from    string // the interface 10.0.0.5 comes off, "" for none
	}{
		{
			name:    "moved from eth2 to eth3: eth2 keeps its other address",
			desired: "interfaces: [{name: eth3, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]\n",
			want: `interfaces:
- ipv4: {address: [{ip: 10.0.0.5, prefix-length: 24}], dhcp: false, enabled: true}
  name: eth3
  state: up
  type: ethernet
- ipv4: {address: [{ip: 192.0.2.9, prefix-length: 24}], dhcp: false, enabled: true}
  name: eth2
  state: up
  type: ethernet
`,
			from: "eth2",
		},
		{
			name:    "where it is already: nothing moves",
			desired: "interfaces: [{name: eth2, type: ethernet, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]\n",
		},
		{
			name: "eth2 named with a list of its own: applied as it is",
			desired: "interfaces: [{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}, " +
				"{name: eth2, ipv4: {enabled: true, address: []}}]\n",
		},
		{
			name: "eth2 named without a list: its settings, its addresses without the pooled one",
			desired: "interfaces: [{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}, " +
				"{name: eth2, mtu: 9000, ipv4: {enabled: true}}]\n",
			want: `interfaces:
- ipv4: {address: [{ip: 10.0.0.5, prefix-length: 24}], enabled: true}
  name: eth3
- ipv4: {address: [{ip: 192.0.2.9, prefix-length: 24}], dhcp: false, enabled: true}
  mtu: 9000
  name: eth2
`,
			from: "eth2",
		},
		{
			name: "eth2 taken down: its addresses go with it",
			desired: "interfaces: [{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}, " +
				"{name: eth2, state: down}]\n",
		},
		{
			name: "onto a bridge eth2 becomes a port of: eth2 is the bridge's, nmstate takes its addresses off",
			desired: "interfaces: [{name: br0, type: linux-bridge, bridge: {port: [{name: eth2}]}, " +
				"ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]\n",
		},
		{
			name: "onto a bond eth2 joins (controller named on the port)",
			desired: "interfaces: [{name: bond0, type: bond, link-aggregation: {mode: active-backup, port: [eth3]}, " +
				"ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}, {name: eth2, controller: bond0}]\n",
		},
		{
			name: "eth2 a VRF's port: it keeps addresses of its own, the pooled one comes off",
			desired: "interfaces: [{name: vrf0, type: vrf, vrf: {port: [eth2], route-table-id: 100}}, " +
				"{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]\n",
			want: `interfaces:
- {name: vrf0, type: vrf, vrf: {port: [eth2], route-table-id: 100}}
- ipv4: {address: [{ip: 10.0.0.5, prefix-length: 24}], enabled: true}
  name: eth3
- ipv4: {address: [{ip: 192.0.2.9, prefix-length: 24}], dhcp: false, enabled: true}
  name: eth2
  state: up
  type: ethernet
`,
			from: "eth2",
		},
		{
			name: "eth2 an ovs-interface of an OVS bridge: it carries addresses, the pooled one comes off",
			desired: "interfaces: [{name: br-ex, type: ovs-bridge, bridge: {port: [{name: eth2}, {name: eth1}]}}, " +
				"{name: eth2, type: ovs-interface, state: up}, " +
				"{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]\n",
			want: `interfaces:
- {name: br-ex, type: ovs-bridge, bridge: {port: [{name: eth2}, {name: eth1}]}}
- ipv4: {address: [{ip: 192.0.2.9, prefix-length: 24}], dhcp: false, enabled: true}
  name: eth2
  state: up
  type: ovs-interface
- ipv4: {address: [{ip: 10.0.0.5, prefix-length: 24}], enabled: true}
  name: eth3
`,
			from: "eth2",
		},
		{
			name:    "the desired state puts it nowhere: left where it is",
			desired: "interfaces: [{name: eth1, mtu: 1400}]\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, moves, err := OnlyWhereDesired([]byte(tt.desired), []byte(movedCurrent), pooled)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = tt.desired
			}
			if !sameYAML(t, got, []byte(want)) {
				t.Errorf("desired =\n%s\nwant\n%s", got, want)
			}
			if tt.want == "" && string(got) != tt.desired {
				t.Errorf("a state that moves nothing was rewritten:\n%s", got)
			}
			if on := moves.Off[pooled[0]]; on != tt.from || len(moves.Off) > 1 {
				t.Errorf("taken off %v, want %q", moves.Off, tt.from)
			}
			// eth0 carries it on a DHCP family: wherever the desired state
			// puts it, it stays there, and says so.
			stays := ""
			if strings.Contains(tt.desired, "10.0.0.5") {
				stays = "eth0"
			}
			if on := moves.Stays[pooled[0]]; on != stays || len(moves.Stays) > 1 {
				t.Errorf("stays on %v, want %q", moves.Stays, stays)
			}
		})
	}
}

// TestOnlyWhereDesiredBadInput: states that do not parse are errors, not
// a desired state applied without the take-off.
func TestOnlyWhereDesiredBadInput(t *testing.T) {
	pooled := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	if _, _, err := OnlyWhereDesired([]byte("interfaces: [\n"), []byte(movedCurrent), pooled); err == nil {
		t.Error("a desired state that does not parse is accepted")
	}
	if _, _, err := OnlyWhereDesired([]byte("interfaces: []\n"), []byte("{"), pooled); err == nil {
		t.Error("a current state that does not parse is accepted")
	}
}

func sameYAML(t *testing.T, a, b []byte) bool {
	t.Helper()
	ja, err := yaml.YAMLToJSON(a)
	if err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	jb, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return string(ja) == string(jb)
}

// TestOnlyWhereDesiredIPv6AndTwoAddresses: each address is taken off the
// interface it leaves, in its own family, the others' addresses kept.
func TestOnlyWhereDesiredIPv6AndTwoAddresses(t *testing.T) {
	current := `
interfaces:
- name: eth2
  type: ethernet
  state: up
  ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}
  ipv6: {enabled: true, dhcp: false, autoconf: false, address: [{ip: "fd00::5", prefix-length: 64}, {ip: "fd00::9", prefix-length: 64}]}
`
	desired := `interfaces:
- name: eth3
  ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}
  ipv6: {enabled: true, address: [{ip: "fd00::5", prefix-length: 64}]}
`
	want := `interfaces:
- name: eth3
  ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}
  ipv6: {enabled: true, address: [{ip: "fd00::5", prefix-length: 64}]}
- name: eth2
  type: ethernet
  state: up
  ipv4: {enabled: true, dhcp: false, address: []}
  ipv6: {enabled: true, dhcp: false, autoconf: false, address: [{ip: "fd00::9", prefix-length: 64}]}
`
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	got, moves, err := OnlyWhereDesired([]byte(desired), []byte(current), ips)
	if err != nil {
		t.Fatal(err)
	}
	if !sameYAML(t, got, []byte(want)) {
		t.Errorf("desired =\n%s\nwant\n%s", got, want)
	}
	if from := moves.Off; len(from) != 2 || from[ips[0]] != "eth2" || from[ips[1]] != "eth2" {
		t.Errorf("taken off %v, want both from eth2", from)
	}
}

// TestOnlyWhereDesiredIdentifiesInterfaces: an interface the desired
// state names by profile name, MAC or PCI address is the interface it
// identifies, not another one to take the address off; an OVS bridge is
// not its same-name internal interface.
func TestOnlyWhereDesiredIdentifiesInterfaces(t *testing.T) {
	pooled := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	current := `
interfaces:
- name: ens3
  profile-name: mgmt
  type: ethernet
  state: up
  mac-address: "52:54:00:AB:CD:03"
  pci-address: "0000:07:00.0"
  ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}
- name: br0
  type: ovs-bridge
  state: up
  bridge: {port: [{name: br0}]}
- name: br0
  type: ovs-interface
  state: up
  ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.6, prefix-length: 24}, {ip: 192.0.2.1, prefix-length: 24}]}
`
	for _, tt := range []struct {
		name, desired string
		ips           []netip.Addr
		want          string // "" for desired unchanged
		from          string
	}{
		{
			name:    "by MAC address, in other letters",
			desired: `interfaces: [{name: lan, type: ethernet, identifier: mac-address, mac-address: "52:54:00:ab:cd:03", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			ips:     pooled,
		},
		{
			name:    "by PCI address",
			desired: `interfaces: [{name: lan, identifier: pci-address, pci-address: "0000:07:00.0", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			ips:     pooled,
		},
		{
			name:    "by profile name",
			desired: `interfaces: [{name: mgmt, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			ips:     pooled,
		},
		{
			name:    "the MAC of another NIC: the address comes off ens3",
			desired: `interfaces: [{name: lan, identifier: mac-address, mac-address: "52:54:00:ab:cd:04", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			ips:     pooled,
			want: `interfaces:
- {name: lan, identifier: mac-address, mac-address: "52:54:00:ab:cd:04", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
- {name: ens3, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: []}}
`,
			from: "ens3",
		},
		{
			name:    "by MAC address, named as another NIC: the name is the profile's, the address comes off ens3",
			desired: `interfaces: [{name: ens3, identifier: mac-address, mac-address: "52:54:00:ab:cd:04", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			ips:     pooled,
			want: `interfaces:
- {name: ens3, identifier: mac-address, mac-address: "52:54:00:ab:cd:04", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
- {name: ens3, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: []}}
`,
			from: "ens3",
		},
		{
			name: "off the internal interface of an OVS bridge the state names: its own entry, not the bridge's",
			desired: `interfaces: [{name: br0, type: ovs-bridge, state: up, bridge: {port: [{name: br0}]}}, ` +
				`{name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.6, prefix-length: 24}]}}]` + "\n",
			ips: []netip.Addr{netip.MustParseAddr("10.0.0.6")},
			want: `interfaces:
- {name: br0, type: ovs-bridge, state: up, bridge: {port: [{name: br0}]}}
- {name: eth3, ipv4: {enabled: true, address: [{ip: 10.0.0.6, prefix-length: 24}]}}
- {name: br0, type: ovs-interface, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.1, prefix-length: 24}]}}
`,
			from: "br0",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, moves, err := OnlyWhereDesired([]byte(tt.desired), []byte(current), tt.ips)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" && string(got) != tt.desired {
				t.Errorf("a state that moves nothing was rewritten:\n%s", got)
			}
			if tt.want != "" && !sameYAML(t, got, []byte(tt.want)) {
				t.Errorf("desired =\n%s\nwant\n%s", got, tt.want)
			}
			if on := moves.Off[tt.ips[0]]; on != tt.from || len(moves.Off) > 1 || len(moves.Stays) > 0 {
				t.Errorf("taken off %v, stays %v; want off %q", moves.Off, moves.Stays, tt.from)
			}
		})
	}
}

// TestOnlyWhereDesiredLearnedStays: an address on a DHCP or autoconf
// family of another interface cannot be taken off alone; the desired
// state is left as given and the address reported as staying there.
func TestOnlyWhereDesiredLearnedStays(t *testing.T) {
	current := `
interfaces:
- name: eth1
  type: ethernet
  ipv6: {enabled: true, dhcp: false, autoconf: true, address: [{ip: "fd00::5", prefix-length: 64}, {ip: "fd00::77", prefix-length: 64}]}
`
	desired := `interfaces: [{name: eth3, ipv6: {enabled: true, address: [{ip: "fd00::5", prefix-length: 64}]}}]` + "\n"
	ip := netip.MustParseAddr("fd00::5")
	got, moves, err := OnlyWhereDesired([]byte(desired), []byte(current), []netip.Addr{ip})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != desired || len(moves.Off) > 0 {
		t.Errorf("desired =\n%s\ntaken off %v; want it as given, nothing off", got, moves.Off)
	}
	if moves.Stays[ip] != "eth1" || len(moves.Stays) != 1 {
		t.Errorf("stays %v, want fd00::5 on eth1", moves.Stays)
	}
}

// TestOnlyWhereDesiredSharedNames: a MAC names the NIC, not the VLAN on
// it that carries the same MAC; a profile name does not shadow the
// interface whose kernel name it is; a port named by its profile name is
// a port.
func TestOnlyWhereDesiredSharedNames(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	for _, tt := range []struct {
		name, current, desired string
		want                   string // "" for desired unchanged
		from                   string
	}{
		{
			name: "onto a NIC by MAC, off the VLAN on it with the same MAC",
			current: `interfaces:
- {name: ens3, type: ethernet, state: up, mac-address: "52:54:00:AB:CD:03"}
- {name: ens3.100, type: vlan, state: up, mac-address: "52:54:00:AB:CD:03", vlan: {base-iface: ens3, id: 100}, ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
`,
			desired: `interfaces: [{name: lan, identifier: mac-address, mac-address: "52:54:00:ab:cd:03", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}, ` +
				`{name: ens3.100, type: vlan, vlan: {base-iface: lan, id: 100}}]` + "\n",
			want: `interfaces:
- {name: lan, identifier: mac-address, mac-address: "52:54:00:ab:cd:03", ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
- {name: ens3.100, type: vlan, vlan: {base-iface: lan, id: 100}, ipv4: {enabled: true, dhcp: false, address: []}}
`,
			from: "ens3.100",
		},
		{
			name: "onto eth1 by name, off eth3 whose profile is called eth1",
			current: `interfaces:
- {name: eth1, type: ethernet, state: up}
- {name: eth3, profile-name: eth1, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
`,
			desired: `interfaces: [{name: eth1, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
			want: `interfaces:
- {name: eth1, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
- {name: eth3, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: []}}
`,
			from: "eth3",
		},
		{
			name: "onto a bond whose port is named by its profile: the port's addresses are nmstate's to take off",
			current: `interfaces:
- {name: eth3, profile-name: port1, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 10.0.0.5, prefix-length: 24}]}}
`,
			desired: `interfaces: [{name: bond0, type: bond, link-aggregation: {mode: active-backup, port: [port1]}, ipv4: {enabled: true, address: [{ip: 10.0.0.5, prefix-length: 24}]}}]` + "\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, moves, err := OnlyWhereDesired([]byte(tt.desired), []byte(tt.current), []netip.Addr{ip})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" && string(got) != tt.desired {
				t.Errorf("a state that moves nothing was rewritten:\n%s", got)
			}
			if tt.want != "" && !sameYAML(t, got, []byte(tt.want)) {
				t.Errorf("desired =\n%s\nwant\n%s", got, tt.want)
			}
			if on := moves.Off[ip]; on != tt.from || len(moves.Off) > 1 {
				t.Errorf("taken off %v, want %q", moves.Off, tt.from)
			}
		})
	}
}
