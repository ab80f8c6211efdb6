package netstate

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

const twoOnEth1 = `interfaces:
- name: eth0
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: true
    address:
    - ip: 192.168.0.7
      prefix-length: 16
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: 10.10.10.8
      prefix-length: 24
    - ip: 192.0.2.5
      prefix-length: 24
  ipv6:
    enabled: true
    dhcp: false
    autoconf: false
    address:
    - ip: fd00::8
      prefix-length: 64
`

func TestCarriers(t *testing.T) {
	got := Carriers([]byte(twoOnEth1))
	want := map[string]string{"192.168.0.7": "eth0", "10.10.10.8": "eth1", "192.0.2.5": "eth1", "fd00::8": "eth1"}
	if len(got) != len(want) {
		t.Fatalf("Carriers = %v, want %v", got, want)
	}
	for ip, iface := range want {
		if got[netip.MustParseAddr(ip)] != iface {
			t.Errorf("Carriers[%s] = %q, want %q", ip, got[netip.MustParseAddr(ip)], iface)
		}
	}
	if got := Carriers([]byte("{")); len(got) != 0 {
		t.Errorf("a state that does not parse carries %v", got)
	}
}

func TestStaticCarriers(t *testing.T) {
	got := StaticCarriers([]byte(twoOnEth1))
	if _, ok := got[netip.MustParseAddr("192.168.0.7")]; ok || len(got) != 3 || got[netip.MustParseAddr("10.10.10.8")] != "eth1" {
		t.Errorf("StaticCarriers = %v, want eth1's three addresses and not eth0's DHCP one", got)
	}
}

func TestWithoutAddresses(t *testing.T) {
	for _, tt := range []struct {
		name string
		drop []string
		want string
		from map[string]string
		err  error
	}{
		{
			name: "one of two IPv4 addresses",
			drop: []string{"10.10.10.8"},
			want: `{"interfaces":[{"ipv4":{"address":[{"ip":"192.0.2.5","prefix-length":24}],"dhcp":false,"enabled":true},"name":"eth1","state":"up","type":"ethernet"}]}`,
			from: map[string]string{"10.10.10.8": "eth1"},
		},
		{
			name: "the last IPv6 address, and one not carried",
			drop: []string{"fd00::8", "10.99.0.1"},
			want: `{"interfaces":[{"ipv6":{"address":[],"autoconf":false,"dhcp":false,"enabled":true},"name":"eth1","state":"up","type":"ethernet"}]}`,
			from: map[string]string{"fd00::8": "eth1"},
		},
		{
			name: "nothing carried",
			drop: []string{"10.99.0.1"},
			from: map[string]string{},
		},
		{
			name: "an address DHCP gave",
			drop: []string{"192.168.0.7"},
			err:  ErrLearned,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var drop []netip.Addr
			for _, s := range tt.drop {
				drop = append(drop, netip.MustParseAddr(s))
			}
			desired, from, err := WithoutAddresses([]byte(twoOnEth1), drop)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if string(desired) != tt.want {
				t.Errorf("desired =\n%s\nwant\n%s", desired, tt.want)
			}
			if len(from) != len(tt.from) {
				t.Errorf("from = %v, want %v", from, tt.from)
			}
			for ip, iface := range tt.from {
				if from[netip.MustParseAddr(ip)] != iface {
					t.Errorf("from[%s] = %q, want %q", ip, from[netip.MustParseAddr(ip)], iface)
				}
			}
		})
	}
}

func TestStaticAddresses(t *testing.T) {
	state := []byte(`{"interfaces":[{"name":"eth0","ipv4":{"dhcp":true,"address":[{"ip":"192.168.0.9","prefix-length":16}]}},` +
		`{"name":"eth1","ipv4":{"address":[{"ip":"10.0.0.1","prefix-length":24}]},"ipv6":{"address":[{"ip":"fd00::1","prefix-length":64}]}},` +
		`{"name":"eth2","ipv6":{"address":[{"ip":"fd00::2","prefix-length":64}]}}]}`)
	got, err := StaticAddresses(state)
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceAddresses{{Name: "eth1", Addresses: []string{"10.0.0.1/24", "fd00::1/64"}}, {Name: "eth2", Addresses: []string{"fd00::2/64"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := StaticAddresses([]byte("interfaces: [")); err == nil {
		t.Error("a broken state parsed")
	}
}

// TestCarriedStateKeepsWhatIsCarried: what Carriers reads from the state
// CarriedState makes of a state's carriers is those carriers, learned
// addresses, both families, and an address on two interfaces included;
// no carriers make a state that carries nothing.
func TestCarriedStateKeepsWhatIsCarried(t *testing.T) {
	for name, state := range map[string]string{
		"two on eth1, one learned": twoOnEth1,
		"families and a duplicate": `{"interfaces":[` +
			`{"name":"eth2","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.9","prefix-length":24}]},` +
			`"ipv6":{"enabled":true,"autoconf":true,"address":[{"ip":"fd00::9","prefix-length":64},{"ip":"2001:db8::1","prefix-length":64}]}},` +
			`{"name":"br0","ipv4":{"enabled":true,"address":[{"ip":"10.0.0.9","prefix-length":24},{"ip":"10.0.1.1","prefix-length":24}]}}]}`,
		"nothing": `{"interfaces":[{"name":"lo","ipv4":{"enabled":false}}]}`,
	} {
		want := Carriers([]byte(state))
		if got := Carriers(CarriedState(want)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Carriers(CarriedState(%v)) = %v", name, want, got)
		}
	}
	if got := Carriers(CarriedState(nil)); len(got) != 0 {
		t.Errorf("CarriedState(nil) carries %v", got)
	}
}

// TestParseStateReadsJSONAsYAMLDoes: a state in JSON reads the same
// through JSON as through YAML (which converts to JSON first): numbers,
// nested lists, duplicate keys, unicode escapes; JSON that JSON does not
// read (trailing text, a number out of range) goes through YAML from
// scratch and reads as YAML reads it.
func TestParseStateReadsJSONAsYAMLDoes(t *testing.T) {
	for _, in := range []string{
		`{"interfaces":[{"name":"eth1","mtu":9000,"ipv4":{"enabled":true,"address":[{"ip":"10.0.0.9","prefix-length":24}]}}]}`,
		`  {"interfaces":[{"name":"eth1","name":"eth2","ipv6":{"autoconf":true,"address":[{"ip":"fd00::1","prefix-length":64}]}}],"routes":{"running":[]}}`,
		`{"interfaces":[{"name":"\u00e9th0","description":null,"ipv4":{"dhcp":false,"address":[]}}],"dns-resolver":{"running":{"server":["1.1.1.1"]}}}`,
		`{"interfaces":[{"name":"eth1"}]} trailing`,
		`{"interfaces":[{"name":"eth1","mtu":1e400}]}`,
		`{interfaces: [{name: eth1, ipv4: {address: [{ip: 10.0.0.1, prefix-length: 24}]}}]}`,
	} {
		var want state
		wantErr := yaml.Unmarshal([]byte(in), &want)
		got, err := parseState([]byte(in))
		if (err != nil) != (wantErr != nil) || (wantErr == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("parseState(%s) = %v, %v; YAML reads %v, %v", in, got, err, want, wantErr)
		}
	}
}
