package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// status prints the cluster's processes and, per node, the static
// addresses its simulated network carries: what the handlers applied.
func (c *cluster) status(out io.Writer) error {
	fmt.Fprintf(out, "API server %s, kubeconfig %s\n\n", c.APIServer, c.kubeconfig())
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE\tLOG")
	for _, name := range c.order() {
		p := c.Processes[name]
		state := "stopped"
		if p.alive() {
			state = "running"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, p.PID, state, p.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHANDLER\tINTERFACE\tADDRESSES")
	for _, name := range c.order() {
		node, ok := strings.CutPrefix(name, "handler/")
		if !ok {
			continue
		}
		state := "stopped"
		switch p := c.Processes[name]; {
		case p.alive():
			state = "running"
		case p.Removed:
			state = "removed"
		}
		ifaces := staticAddresses(c.simState(node))
		if len(ifaces) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\n", node, state)
		}
		for _, i := range ifaces {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", node, state, i.name, strings.Join(i.addresses, ", "))
		}
	}
	return tw.Flush()
}

type ifaceAddresses struct {
	name      string
	addresses []string
}

// staticAddresses reads a simulated node's state and returns its
// interfaces with static addresses, in order.
func staticAddresses(stateFile string) []ifaceAddresses {
	raw, err := os.ReadFile(stateFile)
	if err != nil {
		return nil
	}
	type address struct {
		IP           string `json:"ip"`
		PrefixLength int    `json:"prefix-length"`
	}
	var s struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 struct {
				Address []address `json:"address"`
			} `json:"ipv4"`
			IPv6 struct {
				Address []address `json:"address"`
			} `json:"ipv6"`
		} `json:"interfaces"`
	}
	if yaml.Unmarshal(raw, &s) != nil {
		return nil
	}
	var out []ifaceAddresses
	for _, i := range s.Interfaces {
		var addrs []string
		for _, a := range append(i.IPv4.Address, i.IPv6.Address...) {
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.IP, a.PrefixLength))
		}
		if len(addrs) > 0 {
			out = append(out, ifaceAddresses{name: i.Name, addresses: addrs})
		}
	}
	return out
}
