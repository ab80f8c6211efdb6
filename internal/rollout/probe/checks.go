package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Names of the probes, as flags and messages spell them.
const (
	APIServerName     = "api-server"
	NodeReadinessName = "node-readiness"
	PingName          = "ping"
	DNSName           = "dns"
)

// DefaultDNSHost is the name the dns probe looks up: kubernetes-nmstate's.
const DefaultDNSHost = "root-servers.net"

// APIServer returns the api-server probe: a GET of namespace "default"
// through reader, which must read from the API server, not a cache.
func APIServer(reader client.Reader) Probe {
	return Probe{Name: APIServerName, Check: func(ctx context.Context) error {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if err := reader.Get(ctx, types.NamespacedName{Name: metav1.NamespaceDefault}, ns); err != nil {
			return fmt.Errorf("get namespace %q: %w", metav1.NamespaceDefault, err)
		}
		return nil
	}}
}

// NodeReadiness returns the node-readiness probe: node's Node, read
// through reader from the API server, has condition Ready True.
func NodeReadiness(reader client.Reader, node string) Probe {
	return Probe{Name: NodeReadinessName, Check: func(ctx context.Context) error {
		var n corev1.Node
		if err := reader.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return fmt.Errorf("get node %q: %w", node, err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s is not Ready (%s: %s)", node, c.Reason, c.Message)
			}
		}
		return fmt.Errorf("node %s reports no Ready condition", node)
	}}
}

// Show reads the node's current state (nmstatectl show).
type Show func(ctx context.Context) ([]byte, error)

// Ping returns the ping probe: the next hop of the default route in the
// state show reads answers pinger.
func Ping(show Show, pinger Pinger) Probe {
	return Probe{Name: PingName, Conditional: true, Check: func(ctx context.Context) error {
		raw, err := show(ctx)
		if err != nil {
			return fmt.Errorf("read the state: %w", err)
		}
		hop, err := DefaultGateway(raw)
		if err != nil {
			return err
		}
		if err := pinger(ctx, hop); err != nil {
			return fmt.Errorf("ping the default gateway %s: %w", hop, err)
		}
		return nil
	}}
}

// DNS returns the dns probe: one of the running nameservers in the state
// show reads answers an NS lookup of host on port (53 unless a test runs
// its own server).
func DNS(show Show, host, port string) Probe {
	return Probe{Name: DNSName, Conditional: true, Check: func(ctx context.Context) error {
		raw, err := show(ctx)
		if err != nil {
			return fmt.Errorf("read the state: %w", err)
		}
		servers, err := Nameservers(raw)
		if err != nil {
			return err
		}
		var errs []error
		for _, s := range servers {
			if err := lookupNS(ctx, net.JoinHostPort(s.String(), port), host); err != nil {
				errs = append(errs, err)
				continue
			}
			return nil
		}
		return errors.Join(errs...)
	}}
}

// lookupNS asks server for host's NS records.
func lookupNS(ctx context.Context, server, host string) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	ns, err := r.LookupNS(ctx, host)
	if err != nil {
		return fmt.Errorf("look up the NS records of %s at %s: %w", host, server, err)
	}
	if len(ns) == 0 {
		return fmt.Errorf("nameserver %s has no NS records for %s", server, host)
	}
	return nil
}

// state is the part of an nmstate state the probes read.
type state struct {
	Routes struct {
		Running []struct {
			Destination      string `json:"destination"`
			NextHopAddress   string `json:"next-hop-address"`
			NextHopInterface string `json:"next-hop-interface"`
			TableID          int    `json:"table-id"`
		} `json:"running"`
	} `json:"routes"`
	DNSResolver struct {
		Running struct {
			Server []string `json:"server"`
		} `json:"running"`
	} `json:"dns-resolver"`
}

// mainTable is the kernel's main routing table; nmstate reports 0 for it
// too.
const mainTable = 254

// DefaultGateway returns the next hop of the default route of the main
// table in an nmstate state (YAML or JSON), IPv4 before IPv6.
func DefaultGateway(raw []byte) (netip.Addr, error) {
	var s state
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return netip.Addr{}, fmt.Errorf("read the routes of the state: %w", err)
	}
	var found []netip.Addr
	for _, r := range s.Routes.Running {
		if r.TableID != 0 && r.TableID != mainTable {
			continue
		}
		if r.Destination != "0.0.0.0/0" && r.Destination != "::/0" {
			continue
		}
		hop, err := netip.ParseAddr(r.NextHopAddress)
		if err != nil || hop.IsUnspecified() {
			continue
		}
		found = append(found, hop)
	}
	for _, hop := range found {
		if hop.Is4() {
			return hop, nil
		}
	}
	if len(found) > 0 {
		return found[0], nil
	}
	return netip.Addr{}, errors.New("no default route with a next hop in the main routing table")
}

// Nameservers returns the running nameservers of an nmstate state.
func Nameservers(raw []byte) ([]netip.Addr, error) {
	var s state
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("read the nameservers of the state: %w", err)
	}
	var out []netip.Addr
	for _, v := range s.DNSResolver.Running.Server {
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil {
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no running nameserver")
	}
	return out, nil
}
