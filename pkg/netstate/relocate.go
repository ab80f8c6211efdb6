package netstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Moves is what OnlyWhereDesired does with a node's addresses.
type Moves struct {
	// Off maps each address taken off an interface to that interface.
	Off map[netip.Addr]string
	// Stays maps each address that stays on an interface the desired
	// state does not put it on to that interface: its family there is
	// configured by DHCP or autoconf, whose addresses nmstate manages
	// itself, so the address cannot be taken off alone. It is then on two
	// interfaces until an admin takes it off.
	Stays map[netip.Addr]string
}

// OnlyWhereDesired returns desired extended so that none of ips that
// desired puts on an interface stays on another interface current
// carries it on. nmstate leaves an interface desired does not name as it
// is: an address whose policy now puts it on another interface (its
// template edited from eth2 to eth3) would otherwise stay on the old one
// too, one address on two NICs. For each such interface desired gains an
// entry with that family's address list as current has it, without
// those addresses (nmstate applies an interface's address list whole); an
// interface desired names gets that list only where its family lists no
// addresses of its own (a list it gives is applied as it is). An
// interface desired names is the one it identifies: by name or profile
// name, or by MAC or PCI address (identifier: mac-address, pci-address).
// An address desired puts nowhere is left where it is; one on a family
// configured by DHCP or autoconf, which nmstate manages itself, stays
// and is reported (Moves.Stays). When nothing moves, desired is returned
// as it was given.
func OnlyWhereDesired(desired, current []byte, ips []netip.Addr) ([]byte, Moves, error) {
	want, err := parseState(desired)
	if err != nil {
		return nil, Moves{}, fmt.Errorf("read the desired state: %w", err)
	}
	have, err := parseState(current)
	if err != nil {
		return nil, Moves{}, fmt.Errorf("read the current state: %w", err)
	}
	wanted := want.interfaces()
	placed, ports := placements(wanted), portsOf(want, have)
	moves := Moves{Off: map[netip.Addr]string{}, Stays: map[netip.Addr]string{}}
	entries := asList(want["interfaces"])
	kernel := map[string]bool{}
	for _, iface := range have.interfaces() {
		kernel[str(iface, "name")] = true
	}
	for _, iface := range have.interfaces() {
		named := namedBy(wanted, iface, kernel)
		if slices.ContainsFunc(named, func(i int) bool { return ports[str(wanted[i], "name")] }) ||
			ports[str(iface, "name")] || ports[str(iface, "profile-name")] {
			continue // a port of a controller has no address of its own
		}
		var drop []netip.Addr
		for _, ip := range ips {
			if on := placed[ip]; len(on) > 0 && !slices.ContainsFunc(on, func(i int) bool { return slices.Contains(named, i) }) {
				drop = append(drop, ip)
			}
		}
		var entry map[string]any
		if len(named) > 0 {
			entry = wanted[named[0]]
		}
		if added := offInterface(iface, entry, drop, moves); added != nil {
			entries = append(entries, added)
		}
	}
	if len(moves.Off) == 0 {
		return desired, moves, nil
	}
	want["interfaces"] = entries
	raw, err := json.Marshal(want)
	if err != nil {
		return nil, Moves{}, fmt.Errorf("write the desired state: %w", err)
	}
	out, err := yaml.JSONToYAML(raw)
	return out, moves, err
}

// offInterface takes drop off the interface iface of the current state:
// it sets the families of entry, the desired state's entry of that
// interface (nil if it has none), that list no addresses, or returns a
// new entry for the desired state when it has none (nil otherwise). Each
// address taken off is noted in moves.Off, each that cannot be in
// moves.Stays.
func offInterface(iface, entry map[string]any, drop []netip.Addr, moves Moves) map[string]any {
	if len(drop) == 0 {
		return nil
	}
	if st := entry["state"]; st == "absent" || st == "down" {
		return nil // the desired state takes the interface down, its addresses with it
	}
	added := entry == nil
	if added {
		entry = skeleton(iface)
	}
	name := str(iface, "name")
	touched := false
	for _, fam := range families {
		f, _ := entry[fam].(map[string]any)
		if _, listed := f["address"]; listed || f["enabled"] == false {
			continue // the desired state's own list is applied whole, or none
		}
		kept, removed, err := withoutIn(iface, fam, drop)
		if errors.Is(err, ErrLearned) {
			noteStays(iface, fam, drop, moves)
		}
		if err != nil || len(removed) == 0 {
			continue
		}
		for k, v := range f {
			kept[k] = v // the desired state's settings of the family, current's addresses
		}
		entry[fam] = kept
		touched = true
		for _, ip := range removed {
			moves.Off[ip] = name
		}
	}
	if !touched || !added {
		return nil
	}
	return entry
}

// Family is the nmstate key of ip's address family: ipv4 or ipv6.
func Family(ip netip.Addr) string {
	if ip.Is4() {
		return families[0]
	}
	return families[1]
}

// noteStays notes in moves.Stays each address of drop on the family fam
// of iface, which nmstate configures by DHCP or autoconf.
func noteStays(iface map[string]any, fam string, drop []netip.Addr, moves Moves) {
	for _, ip := range familyAddresses(iface, fam) {
		if slices.Contains(drop, ip) {
			moves.Stays[ip] = str(iface, "name")
		}
	}
}

// namedBy returns the indexes of the entries of a desired state that name
// the interface iface of a current state (sameInterface); kernel holds
// the current state's interface names.
func namedBy(wanted []map[string]any, iface map[string]any, kernel map[string]bool) []int {
	var out []int
	for i, d := range wanted {
		if sameInterface(d, iface, kernel) {
			out = append(out, i)
		}
	}
	return out
}

// sameInterface reports whether the entry d of a desired state names the
// interface c of a current state, whose interface names are kernel: by
// its name, or by its profile name (what show prints as profile-name
// where it differs from the kernel's name) when no interface has that
// name. An entry that identifies its NIC by address (identifier:
// mac-address or pci-address) names the NIC of that address, of its
// type (ethernet unless it gives one: not the VLANs, bonds or bridges
// that carry the NIC's MAC too), or the interface of its profile name:
// its name is the profile's, whatever NIC has it as kernel name. An OVS
// bridge and an interface of another type are never the same, though
// they may share a name (an OVS bridge and its internal interface).
func sameInterface(d, c map[string]any, kernel map[string]bool) bool {
	if dt, ct := str(d, "type"), str(c, "type"); dt != ct && dt != "" && ct != "" && (dt == "ovs-bridge" || ct == "ovs-bridge") {
		return false
	}
	name := str(d, "name")
	byProfile := name != "" && name == str(c, "profile-name")
	switch id := str(d, "identifier"); id {
	case "mac-address", "pci-address":
		typ := str(d, "type")
		if typ == "" {
			typ = "ethernet"
		}
		return byProfile || (str(d, id) != "" && strings.EqualFold(str(d, id), str(c, id)) && str(c, "type") == typ)
	}
	return name != "" && (name == str(c, "name") || (byProfile && !kernel[name]))
}

// str is the string value of key in m, "" if it has none.
func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// placements maps each address the entries of a desired state put on
// an interface to the indexes of those entries.
func placements(wanted []map[string]any) map[netip.Addr][]int {
	out := map[netip.Addr][]int{}
	for i, iface := range wanted {
		for _, fam := range families {
			for _, ip := range familyAddresses(iface, fam) {
				out[ip] = append(out[ip], i)
			}
		}
	}
	return out
}

// portsOf returns the interfaces the desired state makes ports of a
// bond or a bridge: nmstate refuses an address on such an interface, and
// takes off what it had as it becomes one. A VRF's ports keep their
// addresses, as does an OVS bridge's ovs-interface (the port named as the
// bridge is one), which carries the bridge's: they are not skipped. An
// interface's type is read from the desired state and the current one.
func portsOf(want, have state) map[string]bool {
	is := func(name, typ string) bool {
		for _, s := range []state{want, have} {
			for _, iface := range s.interfaces() {
				if str(iface, "name") == name && str(iface, "type") == typ {
					return true
				}
			}
		}
		return false
	}
	out := map[string]bool{}
	port := func(controller, name string) {
		if name != "" && name != controller && !is(controller, "vrf") && !is(name, "ovs-interface") {
			out[name] = true
		}
	}
	for _, iface := range want.interfaces() {
		name := str(iface, "name")
		if c := str(iface, "controller"); c != "" {
			port(c, name)
		}
		for _, path := range [][]string{{"link-aggregation", "port"}, {"bridge", "port"}, {"vrf", "port"}} {
			section, _ := iface[path[0]].(map[string]any)
			for _, p := range asList(section[path[1]]) {
				switch p := p.(type) {
				case string:
					port(name, p)
				case map[string]any:
					port(name, str(p, "name"))
				}
			}
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
