package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
)

// ping answers "ping -I IFACE -c 1 ADDRESS", the gateway probe
// kubernetes-nmstate's handler runs before and after every apply, from the
// simulated network: the address answers when the interface is up and
// either has an address of the same subnet or carries a running route
// whose next hop it is. An apply that takes the node's uplink down or
// away therefore fails the probe, and the handler rolls it back, as on a
// real node.
func (s *simulator) ping(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ping", flag.ContinueOnError)
	iface := fs.String("I", "", "the interface to ping through")
	_ = fs.Int("c", 1, "how many packets (one is sent)")
	_ = fs.Int("W", 1, "seconds to wait (ignored)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: ping [-I IFACE] [-c COUNT] ADDRESS")
	}
	target, err := netip.ParseAddr(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("ping: %s: Name or service not known", fs.Arg(0))
	}
	state, err := s.current()
	if err != nil {
		return err
	}
	if !reachable(state, *iface, target) {
		fmt.Fprintf(stdout, "PING %s: 1 packets transmitted, 0 received, 100%% packet loss\n", target)
		return fmt.Errorf("ping: %s is unreachable through %q in the simulated network", target, *iface)
	}
	_, err = fmt.Fprintf(stdout, "PING %s: 1 packets transmitted, 1 received, 0%% packet loss\n", target)
	return err
}

// reachable tells whether target answers through iface ("" for any up
// interface) in state.
func reachable(state map[string]any, iface string, target netip.Addr) bool {
	up := upInterfaces(state["interfaces"])
	for _, raw := range asSlice(state["interfaces"]) {
		i := asMap(raw)
		name, _ := i["name"].(string)
		if !up[name] || (iface != "" && name != iface) {
			continue
		}
		for _, family := range []string{"ipv4", "ipv6"} {
			for _, a := range asSlice(asMap(i[family])["address"]) {
				addr := asMap(a)
				ip, err := netip.ParseAddr(fmt.Sprint(addr["ip"]))
				bits, ok := addr["prefix-length"].(float64)
				if err != nil || !ok {
					continue
				}
				if prefix, err := ip.Prefix(int(bits)); err == nil && prefix.Contains(target) && ip != target {
					return true
				}
			}
		}
	}
	for _, raw := range asSlice(asMap(state["routes"])["running"]) {
		r := asMap(raw)
		via, _ := r["next-hop-interface"].(string)
		if fmt.Sprint(r["next-hop-address"]) == target.String() && up[via] && (iface == "" || via == iface) {
			return true
		}
	}
	return false
}

// asSlice returns v as a list, or nil.
func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
