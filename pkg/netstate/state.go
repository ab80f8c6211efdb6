package netstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"sigs.k8s.io/yaml"
)

// InterfaceAddresses is an interface of an nmstate state with its static
// addresses, as "ip/prefix-length", IPv4 first.
type InterfaceAddresses struct {
	Name      string
	Addresses []string
}

// StaticAddresses returns the interfaces of an nmstate state (YAML or
// JSON, as show prints it) that carry static addresses, in the state's
// order. Addresses of a family configured by DHCP or autoconf are the
// lease's, not static, and are left out.
func StaticAddresses(state []byte) ([]InterfaceAddresses, error) {
	type address struct {
		IP           string `json:"ip"`
		PrefixLength int    `json:"prefix-length"`
	}
	type family struct {
		DHCP     bool      `json:"dhcp"`
		Autoconf bool      `json:"autoconf"`
		Address  []address `json:"address"`
	}
	var s struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 family `json:"ipv4"`
			IPv6 family `json:"ipv6"`
		} `json:"interfaces"`
	}
	if err := yaml.Unmarshal(state, &s); err != nil {
		return nil, fmt.Errorf("read the state's interfaces: %w", err)
	}
	static := func(f family) []address {
		if f.DHCP || f.Autoconf {
			return nil
		}
		return f.Address
	}
	var out []InterfaceAddresses
	for _, i := range s.Interfaces {
		var addrs []string
		for _, a := range slices.Concat(static(i.IPv4), static(i.IPv6)) {
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.IP, a.PrefixLength))
		}
		if len(addrs) > 0 {
			out = append(out, InterfaceAddresses{Name: i.Name, Addresses: addrs})
		}
	}
	return out, nil
}

// Carriers maps every address a state (YAML or JSON: what show prints, or
// a desired state) puts on an interface, static or learned, to the first
// interface that has it. A state that does not parse carries nothing.
func Carriers(state []byte) map[netip.Addr]string {
	return carriers(state, true)
}

// StaticCarriers is Carriers without the addresses of families configured
// by DHCP or autoconf: the addresses a node was given by hand (a policy
// with the address typed in), which a pool may adopt.
func StaticCarriers(state []byte) map[netip.Addr]string {
	return carriers(state, false)
}

func carriers(state []byte, learned bool) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	s, err := parseState(state)
	if err != nil {
		return out
	}
	for _, iface := range s.interfaces() {
		name, _ := iface["name"].(string)
		for _, fam := range families {
			if f, _ := iface[fam].(map[string]any); !learned && (f["dhcp"] == true || f["autoconf"] == true) {
				continue
			}
			for _, ip := range familyAddresses(iface, fam) {
				if _, seen := out[ip]; !seen {
					out[ip] = name
				}
			}
		}
	}
	return out
}

// ErrLearned is returned by WithoutAddresses for an address that a state
// has on an interface family configured by DHCP or autoconf: nmstate
// manages such addresses itself, so it cannot be taken off alone.
var ErrLearned = errors.New("the address is on a family configured by DHCP or autoconf")

// WithoutAddresses returns the desired state that takes drop off the
// interfaces of current that carry them and changes nothing else: for
// each such interface its name, type and state, and each affected family
// as current has it but without those addresses (nmstate replaces an
// interface's address list with the one it is given). It also returns the
// interface each address was taken from. Addresses current does not carry
// are left out; when none is carried, desired is nil. An address on a
// family configured by DHCP or autoconf makes it fail with ErrLearned.
func WithoutAddresses(current []byte, drop []netip.Addr) (desired []byte, from map[netip.Addr]string, err error) {
	s, err := parseState(current)
	if err != nil {
		return nil, nil, err
	}
	from = map[netip.Addr]string{}
	var changed []map[string]any
	for _, iface := range s.interfaces() {
		name, _ := iface["name"].(string)
		out := skeleton(iface)
		touched := false
		for _, fam := range families {
			kept, removed, err := withoutIn(iface, fam, drop)
			if err != nil {
				return nil, nil, fmt.Errorf("interface %s: %w", name, err)
			}
			if len(removed) == 0 {
				continue
			}
			touched = true
			out[fam] = kept
			for _, ip := range removed {
				from[ip] = name
			}
		}
		if touched {
			changed = append(changed, out)
		}
	}
	if len(changed) == 0 {
		return nil, from, nil
	}
	desired, err = json.Marshal(map[string]any{"interfaces": changed})
	return desired, from, err
}

// families are the keys of an interface's address families.
var families = []string{"ipv4", "ipv6"}

// withoutIn returns the family fam of iface with the addresses of drop
// taken out, and which it took out.
func withoutIn(iface map[string]any, fam string, drop []netip.Addr) (map[string]any, []netip.Addr, error) {
	f, _ := iface[fam].(map[string]any)
	list, _ := f["address"].([]any)
	var kept []any
	var removed []netip.Addr
	for _, a := range list {
		ip, ok := entryIP(a)
		if ok && slices.Contains(drop, ip) {
			removed = append(removed, ip)
			continue
		}
		kept = append(kept, a)
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	if f["dhcp"] == true || f["autoconf"] == true {
		return nil, nil, fmt.Errorf("%s on %s: %w", removed[0], fam, ErrLearned)
	}
	out := make(map[string]any, len(f))
	for k, v := range f {
		out[k] = v
	}
	if kept == nil {
		kept = []any{}
	}
	out["address"] = kept
	return out, removed, nil
}

// state is a parsed nmstate state.
type state map[string]any

func parseState(raw []byte) (state, error) {
	// JSON, as NodeNetworkStates hold it, is read as JSON: the same values
	// as through YAML (which converts to JSON first), several times faster.
	// What JSON does not read goes through YAML, from scratch.
	if trimmed := bytes.TrimLeft(raw, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		var s state
		if err := json.Unmarshal(trimmed, &s); err == nil {
			return s, nil
		}
	}
	var s state
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("read the state: %w", err)
	}
	return s, nil
}

func (s state) interfaces() []map[string]any {
	list, _ := s["interfaces"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// familyAddresses returns the parseable addresses of one family of an
// interface.
func familyAddresses(iface map[string]any, fam string) []netip.Addr {
	f, _ := iface[fam].(map[string]any)
	list, _ := f["address"].([]any)
	var out []netip.Addr
	for _, a := range list {
		if ip, ok := entryIP(a); ok {
			out = append(out, ip)
		}
	}
	return out
}

// entryIP reads the ip of one entry of an address list.
func entryIP(entry any) (netip.Addr, bool) {
	m, _ := entry.(map[string]any)
	s, _ := m["ip"].(string)
	ip, err := netip.ParseAddr(s)
	return ip, err == nil
}

// CarriedState returns a state that puts each address of carried on the
// interface it maps to, and nothing else: what Carriers reads back from it
// is carried. A reader that only asks which addresses a node carries
// keeps this instead of the whole state (a fleet's states are megabytes).
func CarriedState(carried map[netip.Addr]string) []byte {
	type entry struct {
		IP           string `json:"ip"`
		PrefixLength int    `json:"prefix-length"`
	}
	type family struct {
		Enabled bool    `json:"enabled"`
		Address []entry `json:"address"`
	}
	type iface struct {
		Name string  `json:"name"`
		IPv4 *family `json:"ipv4,omitempty"`
		IPv6 *family `json:"ipv6,omitempty"`
	}
	byName := map[string]*iface{}
	for _, ip := range slices.SortedFunc(maps.Keys(carried), netip.Addr.Compare) {
		name := carried[ip]
		i := byName[name]
		if i == nil {
			i = &iface{Name: name}
			byName[name] = i
		}
		f := &i.IPv4
		if !ip.Is4() {
			f = &i.IPv6
		}
		if *f == nil {
			*f = &family{Enabled: true}
		}
		(*f).Address = append((*f).Address, entry{IP: ip.String(), PrefixLength: ip.BitLen()})
	}
	out := struct {
		Interfaces []*iface `json:"interfaces"`
	}{Interfaces: []*iface{}}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out.Interfaces = append(out.Interfaces, byName[name])
	}
	raw, _ := json.Marshal(out) // plain strings, ints and bools: cannot fail
	return raw
}

// skeleton is an entry naming the interface iface of a current state:
// its name, type and state, none of its settings.
func skeleton(iface map[string]any) map[string]any {
	name, _ := iface["name"].(string)
	out := map[string]any{"name": name}
	for _, key := range []string{"type", "state"} {
		if v, ok := iface[key]; ok {
			out[key] = v
		}
	}
	return out
}
