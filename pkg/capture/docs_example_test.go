package capture

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// docBlock returns the first ```yaml block after heading in the
// repository's reference page, docs/reference.md.
func docBlock(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/reference.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("no yaml block after %q", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// TestDocsGatewayExample renders docs/reference.md's gateway, DNS and
// reservations example through nmpolicy, as a handler would for a node
// given 10.20.20.10, and checks that it is deploy/samples/routed word for
// word, so that neither drifts from what is tested.
func TestDocsGatewayExample(t *testing.T) {
	block := docBlock(t, "### Gateway, DNS and reservations")
	var sample []string
	for _, f := range []string{"nodeippool.yaml", "nncp.yaml"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "samples", "routed", f))
		if err != nil {
			t.Fatal(err)
		}
		sample = append(sample, string(raw))
	}
	if want := strings.Join(sample, "---\n"); block != want {
		t.Fatalf("docs/reference.md's example differs from deploy/samples/routed:\n%s\nwant:\n%s", block, want)
	}
	docs := strings.Split(block, "---\n")
	var policy struct {
		Spec struct {
			Capture      map[string]string `json:"capture"`
			DesiredState any               `json:"desiredState"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(docs[1]), &policy); err != nil {
		t.Fatal(err)
	}
	desired, err := yaml.Marshal(policy.Spec.DesiredState)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(policy.Spec.Capture)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Refs) != 1 || c.Refs[0].Pool != "traffic-2" {
		t.Fatalf("captures %+v", c.Refs)
	}
	allocated := Address{IP: netip.MustParseAddr("10.20.20.10"), PrefixLength: 24, Gateway: netip.MustParseAddr("10.20.20.1"),
		DNSServers: []netip.Addr{netip.MustParseAddr("10.20.20.53")}, DNSSearch: []string{"traffic.example"}}
	out, err := Render(Input{DesiredState: desired, Captures: c, Allocated: map[string]Address{"addr": allocated},
		CurrentState: []byte(currentState)})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 struct {
				Address []struct {
					IP           string `json:"ip"`
					PrefixLength int    `json:"prefix-length"`
				} `json:"address"`
			} `json:"ipv4"`
		} `json:"interfaces"`
		Routes struct {
			Config []map[string]any `json:"config"`
		} `json:"routes"`
		DNSResolver struct {
			Config struct {
				Server []string `json:"server"`
				Search []string `json:"search"`
			} `json:"config"`
		} `json:"dns-resolver"`
	}
	if err := yaml.Unmarshal(out.DesiredState, &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.DesiredState)
	}
	a := got.Interfaces[0].IPv4.Address
	if got.Interfaces[0].Name != "eth2" || len(a) != 1 || a[0].IP != "10.20.20.10" || a[0].PrefixLength != 24 {
		t.Errorf("interfaces: %+v", got.Interfaces)
	}
	if len(got.Routes.Config) != 1 || got.Routes.Config[0]["next-hop-address"] != "10.20.20.1" ||
		got.Routes.Config[0]["destination"] != "10.99.0.0/16" {
		t.Errorf("routes: %+v", got.Routes.Config)
	}
	if strings.Join(got.DNSResolver.Config.Server, ",") != "10.20.20.53" || strings.Join(got.DNSResolver.Config.Search, ",") != "traffic.example" {
		t.Errorf("dns-resolver: %+v", got.DNSResolver.Config)
	}
	if strings.Contains(string(out.DesiredState), "{{") {
		t.Errorf("unrendered template left:\n%s", out.DesiredState)
	}
}
