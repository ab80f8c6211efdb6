package netstate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	"sigs.k8s.io/yaml"
)

// OnlyWhereDesired returns desired extended so that none of ips that
// desired puts on an interface stays on another interface current
// carries it on. nmstate leaves an interface desired does not name as it
// is: an address whose policy now puts it on another interface (its
// template edited from eth2 to eth3) would otherwise stay on the old one
// too, one address on two NICs. For each such interface desired gains an
// entry with that family's address list as current has it, without
// those addresses (nmstate applies an interface's address list whole); an
// interface desired names gets that list only where its family lists no
// addresses of its own (a list it gives is applied as it is). It also
// returns the interface each address comes off. An address desired puts
// nowhere is left where it is, as is one on a family configured by DHCP
// or autoconf, which nmstate manages itself. When nothing moves, desired
// is returned as it was given.
func OnlyWhereDesired(desired, current []byte, ips []netip.Addr) ([]byte, map[netip.Addr]string, error) {
	want, err := parseState(desired)
	if err != nil {
		return nil, nil, fmt.Errorf("read the desired state: %w", err)
	}
	have, err := parseState(current)
	if err != nil {
		return nil, nil, fmt.Errorf("read the current state: %w", err)
	}
	placed, ports := placements(want), portsOf(want, have)
	from := map[netip.Addr]string{}
	entries := asList(want["interfaces"])
	for _, iface := range have.interfaces() {
		name, _ := iface["name"].(string)
		if ports[name] {
			continue // a port of a controller has no address of its own
		}
		var drop []netip.Addr
		for _, ip := range ips {
			if on := placed[ip]; len(on) > 0 && !slices.Contains(on, name) {
				drop = append(drop, ip)
			}
		}
		if entry := offInterface(iface, want, drop, from); entry != nil {
			entries = append(entries, entry)
		}
	}
	if len(from) == 0 {
		return desired, nil, nil
	}
	want["interfaces"] = entries
	raw, err := json.Marshal(want)
	if err != nil {
		return nil, nil, fmt.Errorf("write the desired state: %w", err)
	}
	out, err := yaml.JSONToYAML(raw)
	return out, from, err
}

// offInterface takes drop off the interface iface of the current state:
// it sets the families of want's entry of that interface that list no
// addresses, or returns a new entry for want when want has none (nil
// otherwise). Each address taken off is noted in from.
func offInterface(iface map[string]any, want state, drop []netip.Addr, from map[netip.Addr]string) map[string]any {
	if len(drop) == 0 {
		return nil
	}
	name, _ := iface["name"].(string)
	entry := want.entry(name)
	if st := entry["state"]; st == "absent" || st == "down" {
		return nil // want takes the interface down, its addresses with it
	}
	added := entry == nil
	if added {
		entry = skeleton(iface)
	}
	touched := false
	for _, fam := range families {
		kept, removed, err := withoutIn(iface, fam, drop)
		if err != nil || len(removed) == 0 {
			continue // learned (ErrLearned) or not on this family
		}
		f, _ := entry[fam].(map[string]any)
		if _, listed := f["address"]; listed || f["enabled"] == false {
			continue // want's own list is applied whole, or none
		}
		for k, v := range f {
			kept[k] = v // want's settings of the family, current's addresses
		}
		entry[fam] = kept
		touched = true
		for _, ip := range removed {
			from[ip] = name
		}
	}
	if !touched || !added {
		return nil
	}
	return entry
}

// placements maps each address a state puts on an interface to the
// interfaces that carry it.
func placements(s state) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, iface := range s.interfaces() {
		name, _ := iface["name"].(string)
		for _, fam := range families {
			for _, ip := range familyAddresses(iface, fam) {
				out[ip] = append(out[ip], name)
			}
		}
	}
	return out
}

// portsOf returns the interfaces the desired state makes ports of a
// bond or a bridge: nmstate refuses an address on such an interface, and
// takes off what it had as it becomes one. A VRF's ports keep their
// addresses, as does an OVS bridge's ovs-interface, which carries the
// bridge's: they are not skipped. An interface's type is read from the
// desired state, else from the current one.
func portsOf(want, have state) map[string]bool {
	typeOf := func(name string) string {
		for _, s := range []state{want, have} {
			if e := s.entry(name); e != nil {
				if t, _ := e["type"].(string); t != "" {
					return t
				}
			}
		}
		return ""
	}
	out := map[string]bool{}
	port := func(controller, name string) {
		if name != "" && typeOf(controller) != "vrf" && typeOf(name) != "ovs-interface" {
			out[name] = true
		}
	}
	for _, iface := range want.interfaces() {
		name, _ := iface["name"].(string)
		if c, _ := iface["controller"].(string); c != "" {
			port(c, name)
		}
		for _, path := range [][]string{{"link-aggregation", "port"}, {"bridge", "port"}, {"vrf", "port"}} {
			section, _ := iface[path[0]].(map[string]any)
			for _, p := range asList(section[path[1]]) {
				switch p := p.(type) {
				case string:
					port(name, p)
				case map[string]any:
					n, _ := p["name"].(string)
					port(name, n)
				}
			}
		}
	}
	return out
}

// entry returns the interface name of s, or nil.
func (s state) entry(name string) map[string]any {
	for _, iface := range s.interfaces() {
		if iface["name"] == name {
			return iface
		}
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
