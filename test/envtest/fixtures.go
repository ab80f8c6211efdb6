package envtest

import (
	"context"
	"fmt"
	"strings"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
)

// OneAddressState is a policy's desired state that puts the address of the
// capture addr on eth1, as the README's example does.
const OneAddressState = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
`

// AddressOn is OneAddressState with the capture addr on iface, beside
// the literal addresses others ("ip/prefix-length").
func AddressOn(iface string, others ...string) string {
	var b strings.Builder
	b.WriteString(strings.Replace(OneAddressState, "name: eth1", "name: "+iface, 1))
	for _, o := range others {
		ip, prefix, _ := strings.Cut(o, "/")
		fmt.Fprintf(&b, "    - ip: %s\n      prefix-length: %s\n", ip, prefix)
	}
	return b.String()
}

// PooledPolicyYAML is a NodeNetworkConfigurationPolicy as an admin writes
// it: name, for the nodes labelled key=value, its capture addr drawn from
// pool onto eth1 (OneAddressState).
func PooledPolicyYAML(name, key, value, pool string) string {
	return fmt.Sprintf("apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata: {name: %s}\nspec:\n"+
		"  nodeSelector: {%s: %q}\n  capture: {addr: ippool.%s.allocate}\n  desiredState:\n%s",
		name, key, value, pool, indent(OneAddressState, "    "))
}

// PooledYAML is a PooledNodeNetworkConfigurationPolicy for every node
// (kubernetes.io/os=linux, all at once), its capture addr drawn from pool
// onto iface (OneAddressState's, on iface instead of eth1).
func PooledYAML(name, pool, iface string) string {
	return fmt.Sprintf("apiVersion: nmstate.io/v1\nkind: PooledNodeNetworkConfigurationPolicy\nmetadata: {name: %s}\nspec:\n"+
		"  nodeSelector: {kubernetes.io/os: linux}\n  maxUnavailable: 100%%\n  capture: {addr: ippool.%s.allocate}\n  desiredState:\n%s",
		name, pool, indent(strings.Replace(OneAddressState, "name: eth1", "name: "+iface, 1), "    "))
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// TwoFamiliesState is a desired state that puts the IPv4 address of the
// capture v4 on eth1 and the IPv6 address of the capture v6 on eth2.
const TwoFamiliesState = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.v4.ip }}"
      prefix-length: "{{ capture.v4.prefix-length }}"
- name: eth2
  type: ethernet
  state: up
  ipv6:
    enabled: true
    dhcp: false
    autoconf: false
    address:
    - ip: "{{ capture.v6.ip }}"
      prefix-length: "{{ capture.v6.prefix-length }}"
`

// Events returns "Reason: note" of every Event about the object of kind
// called name, but the audit trail's (AuditEvents).
func Events(ctx context.Context, c client.Reader, kind, name string) ([]string, error) {
	return eventsAbout(ctx, c, kind, name, false)
}

// AuditEvents returns "Reason: note" of the audit trail's Events about an
// object of kind (internal/allocation/audit), which Events leaves out.
func AuditEvents(ctx context.Context, c client.Reader, kind, name string) ([]string, error) {
	return eventsAbout(ctx, c, kind, name, true)
}

func eventsAbout(ctx context.Context, c client.Reader, kind, name string, audited bool) ([]string, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && (e.Action == audit.Action) == audited {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out, nil
}
