package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// merge applies desired to state (see the command's doc).
func merge(state, desired map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range state {
		out[k] = v
	}
	for k, v := range desired {
		switch k {
		case "interfaces":
			ifaces, err := mergeInterfaces(state["interfaces"], v)
			if err != nil {
				return nil, err
			}
			if err := portsWithoutIP(ifaces, v); err != nil {
				return nil, err
			}
			out[k] = ifaces
		case "routes":
			routes, err := mergeRoutes(asMap(state["routes"]), v)
			if err != nil {
				return nil, err
			}
			out[k] = routes
		case "dns-resolver":
			out[k] = mergeDNS(asMap(state["dns-resolver"]), asMap(v))
		default:
			out[k] = v
		}
	}
	if routes := asMap(out["routes"]); routes != nil {
		routes["running"] = withoutRoutesOf(routes["running"], upInterfaces(out["interfaces"]))
	}
	return out, nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// mergeRoutes adds desired's config entries to routes' config and running
// lists, or removes those they match when their state is absent.
func mergeRoutes(routes map[string]any, desired any) (map[string]any, error) {
	d := asMap(desired)
	if d == nil {
		return nil, errors.New("routes must be a map")
	}
	config, _ := routes["config"].([]any)
	running, _ := routes["running"].([]any)
	want, _ := d["config"].([]any)
	for _, w := range want {
		r := asMap(w)
		if r == nil {
			return nil, fmt.Errorf("route %v is not a map", w)
		}
		if r["state"] == "absent" {
			config, running = removeMatching(config, r), removeMatching(running, r)
			continue
		}
		r = maps.Clone(r)
		if _, ok := r["table-id"]; !ok {
			r["table-id"] = float64(254)
		}
		config, running = addRoute(config, r), addRoute(running, r)
	}
	return map[string]any{"config": config, "running": running}, nil
}

// removeMatching drops every route that has all of match's keys (but
// state) with the same values.
func removeMatching(routes []any, match map[string]any) []any {
	return slices.DeleteFunc(slices.Clone(routes), func(x any) bool {
		r := asMap(x)
		for k, v := range match {
			if k != "state" && fmt.Sprint(r[k]) != fmt.Sprint(v) {
				return false
			}
		}
		return true
	})
}

// addRoute adds r unless a route with the same destination, next hop and
// table is there.
func addRoute(routes []any, r map[string]any) []any {
	key := func(m map[string]any) string {
		return fmt.Sprint(m["destination"], m["next-hop-address"], m["next-hop-interface"], m["table-id"])
	}
	for _, x := range routes {
		if key(asMap(x)) == key(r) {
			return routes
		}
	}
	return append(slices.Clone(routes), r)
}

// upInterfaces returns the names of the interfaces that are not down.
func upInterfaces(interfaces any) map[string]bool {
	up := map[string]bool{}
	list, _ := interfaces.([]any)
	for _, x := range list {
		i := asMap(x)
		if name, _ := i["name"].(string); name != "" && i["state"] != "down" {
			up[name] = true
		}
	}
	return up
}

// withoutRoutesOf drops the running routes through interfaces that are
// not up: down, or gone.
func withoutRoutesOf(running any, up map[string]bool) []any {
	list, _ := running.([]any)
	return slices.DeleteFunc(slices.Clone(list), func(x any) bool {
		name, _ := asMap(x)["next-hop-interface"].(string)
		return name != "" && !up[name]
	})
}

// mergeDNS replaces the resolver's config; servers configured become the
// running ones.
func mergeDNS(current, desired map[string]any) map[string]any {
	out := map[string]any{"config": map[string]any{}, "running": current["running"]}
	if c := asMap(desired["config"]); c != nil {
		out["config"] = c
		if servers, _ := c["server"].([]any); len(servers) > 0 {
			out["running"] = maps.Clone(c)
		}
	}
	return out
}

func mergeInterfaces(current, desired any) ([]any, error) {
	cur, _ := current.([]any)
	want, ok := desired.([]any)
	if !ok {
		return nil, errors.New("interfaces must be a list")
	}
	out := append([]any(nil), cur...)
	for _, d := range want {
		di, ok := d.(map[string]any)
		name, _ := di["name"].(string)
		if !ok || name == "" {
			return nil, fmt.Errorf("interface %v has no name", d)
		}
		i := indexOf(out, name)
		switch {
		case di["state"] == "absent" && i >= 0:
			out = append(out[:i], out[i+1:]...)
		case di["state"] == "absent":
		case i >= 0:
			merged := map[string]any{}
			for k, v := range out[i].(map[string]any) {
				merged[k] = v
			}
			for k, v := range di {
				merged[k] = v
			}
			out[i] = merged
		default:
			out = append(out, di)
		}
	}
	return out, nil
}

func indexOf(ifaces []any, name string) int {
	for i, x := range ifaces {
		if m, ok := x.(map[string]any); ok && m["name"] == name {
			return i
		}
	}
	return -1
}

// portsWithoutIP refuses, as nmstate does, a desired state that enables
// IP on an interface the merged interfaces make a port of a bond, a
// Linux bridge or an OVS bridge, and disables IP on every such port (an
// interface becoming one loses its addresses). A VRF's ports, and an OVS
// bridge's internal interfaces, keep theirs.
func portsWithoutIP(merged []any, desired any) error {
	want, _ := desired.([]any)
	ports := portsIn(merged, want)
	for _, x := range want {
		d := asMap(x)
		name, _ := d["name"].(string)
		if _, port := ports[name]; !port || d["state"] == "absent" {
			continue
		}
		for _, fam := range []string{"ipv4", "ipv6"} {
			if asMap(d[fam])["enabled"] == true {
				return fmt.Errorf("InvalidArgument: Interface %s cannot have IP enabled as it is attached to controller %s, where IP is not allowed", name, ports[name])
			}
		}
	}
	for i, x := range merged {
		m := asMap(x)
		name, _ := m["name"].(string)
		if _, port := ports[name]; port {
			m = maps.Clone(m)
			m["ipv4"] = map[string]any{"enabled": false}
			m["ipv6"] = map[string]any{"enabled": false}
			merged[i] = m
		}
	}
	return nil
}

// portsIn maps each interface of merged that is a port of a bond, a
// Linux bridge or an OVS bridge (not an OVS internal interface) to its
// controller: in the controller's port list, or given by the port's
// controller key in want (the state shown does not keep that key). The
// simulator merges interfaces by name, so an OVS bridge and its
// same-name internal interface are one entry: a controller's kind is
// read from its port list's section, not from its type.
func portsIn(merged, want []any) map[string]string {
	kind := map[string]string{}
	internal := map[string]bool{}
	ports := map[string]string{} // port: its controller
	for _, x := range merged {
		m := asMap(x)
		name, _ := m["name"].(string)
		t, _ := m["type"].(string)
		if t == "ovs-interface" {
			internal[name] = true
		}
		for section, k := range map[string]string{"link-aggregation": "bond", "bridge": "linux-bridge", "vrf": "vrf"} {
			if _, ok := m[section]; !ok {
				continue
			}
			if section == "bridge" && strings.HasPrefix(t, "ovs-") {
				k = "ovs-bridge"
			}
			kind[name] = k
		}
		for _, p := range portNames(m) {
			ports[p] = name
		}
	}
	for _, x := range want {
		m := asMap(x)
		if c, _ := m["controller"].(string); c != "" {
			name, _ := m["name"].(string)
			ports[name] = c
		}
	}
	for port, controller := range ports {
		if t := kind[controller]; port == controller || internal[port] || (t != "bond" && t != "linux-bridge" && t != "ovs-bridge") {
			delete(ports, port)
		}
	}
	return ports
}

// portNames lists the ports of a bond, a bridge or a VRF.
func portNames(iface map[string]any) []string {
	var out []string
	for _, path := range [][2]string{{"link-aggregation", "port"}, {"bridge", "port"}, {"vrf", "port"}} {
		list, _ := asMap(iface[path[0]])[path[1]].([]any)
		for _, p := range list {
			switch p := p.(type) {
			case string:
				out = append(out, p)
			case map[string]any:
				if n, _ := p["name"].(string); n != "" {
					out = append(out, n)
				}
			}
		}
	}
	return out
}
