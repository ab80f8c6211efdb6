package v1_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// k is a client of the real API server that TestMain starts.
var k client.Client

func TestMain(m *testing.M) {
	env, err := envtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func pool(name string, r ippoolv1.IPRange) *ippoolv1.NodeIPPool {
	return &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
}

// with returns a pool of range r whose spec change sets.
func with(name string, r ippoolv1.IPRange, change func(*ippoolv1.NodeIPPoolSpec)) *ippoolv1.NodeIPPool {
	p := pool(name, r)
	change(&p.Spec)
	return p
}

func TestAdmissionRejectsInvalidPools(t *testing.T) {
	v4 := ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"10.10.10.4", "10.10.10.8/30"}}
	v6 := ippoolv1.IPRange{CIDR: "2001:db8::/120"}
	reserve := func(rs ...ippoolv1.Reservation) func(*ippoolv1.NodeIPPoolSpec) {
		return func(s *ippoolv1.NodeIPPoolSpec) { s.Reservations = rs }
	}
	manyExcludes := make([]string, 129)
	for i := range manyExcludes {
		manyExcludes[i] = fmt.Sprintf("10.10.10.%d", i+1)
	}
	tests := []struct {
		name  string
		pool  *ippoolv1.NodeIPPool
		wants []string
	}{
		{"cidr without prefix", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0"}),
			[]string{"cidr 10.10.10.0 is not a CIDR: write address/prefix-length"}},
		{"cidr with host bits", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.1/24"}),
			[]string{"cidr 10.10.10.1/24 is not in canonical form: write the network address"}},
		{"ipv6 cidr not canonical", pool("p", ippoolv1.IPRange{CIDR: "2001:DB8:0::/64"}),
			[]string{"cidr 2001:DB8:0::/64 is not in canonical form"}},
		{"ipv4-mapped ipv6 cidr", pool("p", ippoolv1.IPRange{CIDR: "::ffff:10.0.0.0/120"}),
			[]string{"cidr ::ffff:10.0.0.0/120 is not a CIDR"}},
		{"cidr missing", pool("p", ippoolv1.IPRange{Start: "10.0.0.1"}),
			[]string{"spec.range.cidr"}},
		{"start not an ip", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.10.300"}),
			[]string{"start 10.10.10.300 is not an IP address"}},
		{"end not an ip", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", End: "banana"}),
			[]string{"end banana is not an IP address"}},
		{"ipv4-mapped start", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "::ffff:10.10.10.1"}),
			[]string{"start ::ffff:10.10.10.1 is not an IP address"}},
		{"start of the other family", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "2001:db8::1"}),
			[]string{"start 2001:db8::1 and cidr 10.10.10.0/24 are of different IP families"}},
		{"end of the other family", pool("p", ippoolv1.IPRange{CIDR: "2001:db8::/64", End: "10.10.10.1"}),
			[]string{"end 10.10.10.1 and cidr 2001:db8::/64 are of different IP families"}},
		{"start outside cidr", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.11.1"}),
			[]string{"start 10.10.11.1 is outside cidr 10.10.10.0/24"}},
		{"end outside cidr", pool("p", ippoolv1.IPRange{CIDR: "2001:db8::/120", End: "2001:db8::1:1"}),
			[]string{"end 2001:db8::1:1 is outside cidr 2001:db8::/120"}},
		{"start after end", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.10.9", End: "10.10.10.3"}),
			[]string{"start 10.10.10.9 is after end 10.10.10.3: swap them"}},
		{"start after end in the first octet bit", pool("p", ippoolv1.IPRange{CIDR: "128.0.0.0/1", Start: "200.0.0.1", End: "128.0.0.1"}),
			[]string{"start 200.0.0.1 is after end 128.0.0.1"}},
		{"ipv6 start after end", pool("p", ippoolv1.IPRange{CIDR: "2001:4860:4860::/116", Start: "2001:4860:4860::00FF", End: "2001:4860:4860::000F"}),
			[]string{"start 2001:4860:4860::00FF is after end 2001:4860:4860::000F"}},
		{"ipv6 larger than 2^64 by default", pool("p", ippoolv1.IPRange{CIDR: "2001:db8::/48"}),
			[]string{"cidr 2001:db8::/48 holds more than 2^64 addresses: set start and end inside one /64"}},
		{"ipv6 start and end in different /64s", pool("p", ippoolv1.IPRange{CIDR: "2001:db8::/48", Start: "2001:db8:0:1::1", End: "2001:db8:0:2::1"}),
			[]string{"holds more than 2^64 addresses"}},
		{"exclude not an address", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"10.10.10.4", "ten"}}),
			[]string{"exclude ten is neither an IP address nor a CIDR without host bits"}},
		{"exclude cidr with host bits", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"10.10.10.9/30"}}),
			[]string{"exclude 10.10.10.9/30 is neither an IP address nor a CIDR without host bits"}},
		{"exclude of the other family", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"2001:db8::1"}}),
			[]string{"exclude 2001:db8::1 and cidr 10.10.10.0/24 are of different IP families"}},
		{"exclude outside cidr", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"10.10.11.4"}}),
			[]string{"exclude 10.10.11.4 is outside cidr 10.10.10.0/24: remove it or fix the address"}},
		{"exclude wider than cidr", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: []string{"10.10.0.0/16"}}),
			[]string{"exclude 10.10.0.0/16 is outside cidr 10.10.10.0/24"}},
		{"too many excludes", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Exclude: manyExcludes}),
			[]string{"spec.range.exclude", "must have at most 128 items"}},
		{"name with a dot", pool("traffic.one", ippoolv1.IPRange{CIDR: "10.10.10.0/24"}),
			[]string{"name traffic.one is not a DNS-1123 label"}},
		{"name longer than a label", pool(strings.Repeat("a", 64), ippoolv1.IPRange{CIDR: "10.10.10.0/24"}),
			[]string{"is not a DNS-1123 label"}},
		{"gateway not an ip", with("p", v4, func(s *ippoolv1.NodeIPPoolSpec) { s.Gateway = "router" }),
			[]string{"gateway router is not an IP address"}},
		{"gateway outside cidr", with("p", v4, func(s *ippoolv1.NodeIPPoolSpec) { s.Gateway = "10.10.11.1" }),
			[]string{"gateway 10.10.11.1 is outside cidr 10.10.10.0/24: the gateway must be on the subnet of the pool"}},
		{"gateway of the other family", with("p", v4, func(s *ippoolv1.NodeIPPoolSpec) { s.Gateway = "2001:db8::1" }),
			[]string{"gateway 2001:db8::1 is outside cidr 10.10.10.0/24"}},
		{"dns server not an ip", with("p", v4, func(s *ippoolv1.NodeIPPoolSpec) {
			s.DNS = &ippoolv1.DNS{Servers: []string{"10.10.10.53", "dns.example.com"}}
		}), []string{"dns server dns.example.com is not an IP address"}},
		{"dns search not a domain", with("p", v4, func(s *ippoolv1.NodeIPPoolSpec) {
			s.DNS = &ippoolv1.DNS{Search: []string{"example.com", "-bad-.example"}}
		}), []string{"dns search domain -bad-.example is not a domain name"}},
		{"reservation for nobody", with("p", v4, reserve(ippoolv1.Reservation{IP: "10.10.10.5"})),
			[]string{"set exactly one of node and nodeSelector"}},
		{"reservation for a node and a selector", with("p", v4, reserve(ippoolv1.Reservation{IP: "10.10.10.5", Node: "worker-1",
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}})),
			[]string{"set exactly one of node and nodeSelector"}},
		{"reservation not an ip", with("p", v4, reserve(ippoolv1.Reservation{IP: "10.10.10.500", Node: "worker-1"})),
			[]string{"reservation 10.10.10.500 is not an IP address"}},
		{"reservation not in canonical form", with("p", v6, reserve(ippoolv1.Reservation{IP: "2001:DB8:0::5", Node: "worker-1"})),
			[]string{"spec.reservations[0].ip", "a reservation is not an address in canonical form"}},
		{"reservation listed twice", with("p", v6, reserve(ippoolv1.Reservation{IP: "2001:db8::5", Node: "worker-1"},
			ippoolv1.Reservation{IP: "2001:db8::5", Node: "worker-2"})),
			[]string{"spec.reservations[1]", "Duplicate value"}},
		{"two mistakes reported together", pool("p", ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.11.1", Exclude: []string{"10.10.12.1"}}),
			[]string{"start 10.10.11.1 is outside cidr", "exclude 10.10.12.1 is outside cidr"}},
	}
	if len(tests) < 20 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := k.Create(context.Background(), tt.pool)
			if err == nil {
				_ = k.Delete(context.Background(), tt.pool)
				t.Fatalf("pool %+v was accepted", tt.pool.Spec.Range)
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\n does not contain %q", err, want)
				}
			}
			assertNoPool(t, tt.pool.Name)
		})
	}
}

func assertNoPool(t *testing.T, name string) {
	t.Helper()
	var list ippoolv1.NodeIPPoolList
	if err := k.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Name == name {
			t.Fatalf("a rejected pool %q exists", name)
		}
	}
}

// The specification's examples and this project's, with the specification's
// typos ("10.10.10.11.10") and its non-canonical /16 CIDR corrected.
var validRanges = map[string]ippoolv1.IPRange{
	"traffic-1":    {CIDR: "10.10.10.0/24", Start: "10.10.10.1", End: "10.10.10.10", Exclude: []string{"10.10.10.4", "10.10.10.7"}},
	"traffic-2":    {CIDR: "10.10.11.0/24", Start: "10.10.11.1", End: "10.10.11.10", Exclude: []string{"10.10.11.4", "10.10.11.7"}},
	"design":       {CIDR: "10.10.10.0/24", Start: "10.10.10.1", End: "10.10.10.10", Exclude: []string{"10.10.10.4", "10.10.10.8/30"}},
	"seed-24":      {CIDR: "10.10.11.0/24", Start: "10.10.11.4", End: "10.10.11.10", Exclude: []string{"10.10.11.5", "10.10.11.7"}},
	"seed-16":      {CIDR: "10.10.0.0/16", Start: "10.10.11.4", End: "10.10.12.10", Exclude: []string{"10.10.11.5", "10.10.12.7"}},
	"seed-v6":      {CIDR: "2001:4860:4860::/116", Start: "2001:4860:4860::000F", End: "2001:4860:4860::00FF", Exclude: []string{"2001:4860:4860::0010", "2001:4860:4860::001F"}},
	"defaults":     {CIDR: "192.168.0.0/16"},
	"start-only":   {CIDR: "10.0.0.0/24", Start: "10.0.0.100"},
	"end-only":     {CIDR: "10.0.0.0/24", End: "10.0.0.9"},
	"p2p":          {CIDR: "10.0.0.0/31"},
	"host":         {CIDR: "10.0.0.9/32"},
	"v6-64":        {CIDR: "2001:db8::/64"},
	"v6-48-in-64":  {CIDR: "2001:db8::/48", Start: "2001:db8:0:7::1", End: "2001:db8:0:7::ffff"},
	"v6-p2p":       {CIDR: "2001:db8::/127"},
	"v6-host":      {CIDR: "2001:db8::9/128"},
	"v6-exclude64": {CIDR: "2001:db8::/64", Exclude: []string{"2001:db8::/120", "2001:db8::ffff"}},
	"equal-bounds": {CIDR: "10.0.0.0/24", Start: "10.0.0.5", End: "10.0.0.5"},
	"close-bounds": {CIDR: "10.0.0.0/8", Start: "10.127.255.255", End: "10.128.0.0"},
}

func TestAdmissionAcceptsGatewayDNSAndReservations(t *testing.T) {
	ctx := context.Background()
	p := with("extras", ippoolv1.IPRange{CIDR: "10.30.0.0/24", Exclude: []string{"10.30.0.128/25"}}, func(s *ippoolv1.NodeIPPoolSpec) {
		s.Gateway = "10.30.0.1"
		s.DNS = &ippoolv1.DNS{Servers: []string{"10.30.0.53", "2001:db8::53"}, Search: []string{"example.com", "lab"}}
		s.Reservations = []ippoolv1.Reservation{
			{IP: "10.30.0.10", Node: "worker-1"},
			{IP: "10.30.0.11", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"serial": "abc123"}}, Policy: "static-ip"},
		}
	})
	if err := k.Create(ctx, p); err != nil {
		t.Fatalf("rejected: %v", err)
	}
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
}

func TestAdmissionAcceptsValidPools(t *testing.T) {
	for name, r := range validRanges {
		t.Run(name, func(t *testing.T) {
			p := pool(name, r)
			if err := k.Create(context.Background(), p); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			t.Cleanup(func() { _ = k.Delete(context.Background(), p) })
			// What admission accepts, the allocator accepts too.
			if _, err := ippool.NewRange(ippool.Spec{CIDR: r.CIDR, Start: r.Start, End: r.End, Exclude: r.Exclude}); err != nil {
				t.Fatalf("admitted, but the allocator refuses it: %v", err)
			}
		})
	}
}

func TestImmutableFields(t *testing.T) {
	ctx := context.Background()
	p := pool("immutable", ippoolv1.IPRange{CIDR: "10.20.0.0/24", Start: "10.20.0.10"})
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
	p.Spec.Range.CIDR = "10.20.1.0/24"
	p.Spec.Range.Start = "10.20.1.10"
	err := k.Update(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "spec.range.cidr is immutable (10.20.0.0/24): to renumber the pool into another subnet, create a new NodeIPPool") {
		t.Fatalf("update = %v, want the immutability message", err)
	}
	for name, change := range map[string]func(*ippoolv1.NodeIPPoolSpec){
		// The same subnet spelled otherwise is another CIDR too.
		"spec.range.cidr is immutable": func(s *ippoolv1.NodeIPPoolSpec) { s.Range.CIDR = "10.20.0.0/23" },
		"spec.gateway is immutable":    func(s *ippoolv1.NodeIPPoolSpec) { s.Gateway = "10.20.0.1" },
		"spec.dns is immutable":        func(s *ippoolv1.NodeIPPoolSpec) { s.DNS = &ippoolv1.DNS{Servers: []string{"10.20.0.53"}} },
	} {
		var fresh ippoolv1.NodeIPPool
		if err := k.Get(ctx, client.ObjectKeyFromObject(p), &fresh); err != nil {
			t.Fatal(err)
		}
		change(&fresh.Spec)
		if err := k.Update(ctx, &fresh); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("update = %v, want %q", err, name)
		}
	}
	// Status stays writable through its subresource.
	var got ippoolv1.NodeIPPool
	if err := k.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Range.Start != "10.20.0.10" {
		t.Fatalf("spec changed to %+v", got.Spec.Range)
	}
	got.Status.Size, got.Status.Free = 245, 245
	if err := k.Status().Update(ctx, &got); err != nil {
		t.Fatalf("status update: %v", err)
	}
	// Start, end and exclude may change here (with no webhook installed);
	// the pool controller's webhook guards the addresses in use.
	got.Spec.Range.Start, got.Spec.Range.End, got.Spec.Range.Exclude = "10.20.0.5", "10.20.0.200", []string{"10.20.0.7"}
	if err := k.Update(ctx, &got); err != nil {
		t.Fatalf("growing the range in place: %v", err)
	}
	// Reservations may change.
	got.Spec.Reservations = []ippoolv1.Reservation{{IP: "10.20.0.30", Node: "worker-1"}}
	if err := k.Update(ctx, &got); err != nil {
		t.Fatalf("adding a reservation: %v", err)
	}
	got.Spec.Reservations = nil
	if err := k.Update(ctx, &got); err != nil {
		t.Fatalf("removing a reservation: %v", err)
	}
}

// startBeforeEndTerm is the test of bit position p that the unrolled
// start-after-end rules of IPRange repeat.
func startBeforeEndTerm(p int) string {
	a, b := fmt.Sprintf("'/%d'", p), fmt.Sprintf("'/%d'", p+1)
	return fmt.Sprintf("(cidr(self.start + %s).containsIP(self.end) && !cidr(self.start + %s).containsIP(self.end) && "+
		"cidr(self.start + %s).containsIP(cidr(self.start + %s).masked().ip()))", a, b, b, a)
}

// TestStartBeforeEndRules: the CRD's start-after-end rules test every bit
// position, 32 for IPv4 and 128 for IPv6. hack/range-order generates them;
// TestAdmissionOrdersStartAndEnd checks what they decide on random pairs,
// which cannot reach every position (their pools fix the high bits), so
// this test reads the rules themselves.
func TestStartBeforeEndRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "deploy", "crd", "nmstate.io_nodeippools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, r := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["range"].XValidations {
		rules[r.Rule] = true
	}
	for _, fam := range []struct{ family, bits int }{{4, 32}, {6, 128}} {
		terms := make([]string, fam.bits)
		for p := range terms {
			terms[p] = startBeforeEndTerm(p)
		}
		rule := fmt.Sprintf("!has(self.start) || !has(self.end) || !isIP(self.start) || !isIP(self.end) || "+
			"ip(self.start).family() != %d || ip(self.end).family() != %d || ip(self.start) == ip(self.end) || %s",
			fam.family, fam.family, strings.Join(terms, " || "))
		if !rules[rule] {
			t.Errorf("the CRD has no IPv%d start-after-end rule of %d unrolled startBeforeEndTerm terms: run make manifests (hack/range-order generates the rules)", fam.family, fam.bits)
		}
	}
}

// TestAdmissionOrdersStartAndEnd compares the API server's verdict on random
// start/end pairs with Go's ordering of the same addresses.
func TestAdmissionOrdersStartAndEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		cidr   string
		random func() netip.Addr
	}{
		{"10.0.0.0/8", func() netip.Addr {
			return netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}},
		{"2001:db8:0:1::/64", func() netip.Addr {
			b := netip.MustParseAddr("2001:db8:0:1::").As16()
			for i := 8 + rng.IntN(8); i < 16; i++ {
				b[i] = byte(rng.IntN(256))
			}
			return netip.AddrFrom16(b)
		}},
	}
	for _, c := range cases {
		for i := range 15 {
			start, end := c.random(), c.random()
			p := pool(fmt.Sprintf("order-%d", i), ippoolv1.IPRange{CIDR: c.cidr, Start: start.String(), End: end.String()})
			err := k.Create(context.Background(), p)
			if err == nil {
				_ = k.Delete(context.Background(), p)
			}
			if wantOK := !end.Less(start); (err == nil) != wantOK {
				t.Errorf("start %s end %s: admission error %v, want accepted=%v", start, end, err, wantOK)
			}
		}
	}
}

// TestEntriesNameTheirHolder: a pool's entries name their holder in
// holder, in the deprecated enactment (pools written before holder), or
// in both, equal; two different names, or none, are refused.
func TestEntriesNameTheirHolder(t *testing.T) {
	ctx := context.Background()
	p := pool("holders", ippoolv1.IPRange{CIDR: "10.11.0.0/24"})
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(ctx, p) })
	for _, tc := range []struct {
		name  string
		entry ippoolv1.InFlightAddress
		kept  ippoolv1.KeptAddress
		q     ippoolv1.QuarantinedAddress
		err   string
	}{
		{"holder", ippoolv1.InFlightAddress{Holder: "n1.p"}, ippoolv1.KeptAddress{Holder: "n2.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p"}, ""},
		{"enactment only, as before holder", ippoolv1.InFlightAddress{DeprecatedEnactment: "n1.p"},
			ippoolv1.KeptAddress{DeprecatedEnactment: "n2.p"}, ippoolv1.QuarantinedAddress{DeprecatedEnactment: "n3.p"}, ""},
		{"both, equal", ippoolv1.InFlightAddress{Holder: "n1.p", DeprecatedEnactment: "n1.p"},
			ippoolv1.KeptAddress{Holder: "n2.p", DeprecatedEnactment: "n2.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p", DeprecatedEnactment: "n3.p"}, ""},
		{"an in-flight entry naming two holders", ippoolv1.InFlightAddress{Holder: "n1.p", DeprecatedEnactment: "n9.p"},
			ippoolv1.KeptAddress{Holder: "n2.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p"}, "enactment is the deprecated name of holder: when both are set they must be equal"},
		{"a kept entry naming two holders", ippoolv1.InFlightAddress{Holder: "n1.p"},
			ippoolv1.KeptAddress{Holder: "n2.p", DeprecatedEnactment: "n9.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p"}, "enactment is the deprecated name of holder"},
		{"a quarantine naming two holders", ippoolv1.InFlightAddress{Holder: "n1.p"},
			ippoolv1.KeptAddress{Holder: "n2.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p", DeprecatedEnactment: "n9.p"}, "enactment is the deprecated name of holder"},
		{"an in-flight entry naming none", ippoolv1.InFlightAddress{},
			ippoolv1.KeptAddress{Holder: "n2.p"}, ippoolv1.QuarantinedAddress{Holder: "n3.p"}, "name the holder in holder"},
		{"a kept entry naming none", ippoolv1.InFlightAddress{Holder: "n1.p"},
			ippoolv1.KeptAddress{}, ippoolv1.QuarantinedAddress{Holder: "n3.p"}, "name the holder in holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cur ippoolv1.NodeIPPool
			if err := k.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
				t.Fatal(err)
			}
			tc.entry.IP, tc.entry.Token, tc.entry.Since = "10.11.0.1", "1", metav1.Now()
			tc.kept.IP, tc.kept.Node, tc.kept.Capture, tc.kept.Since = "10.11.0.2", "n2", "addr", metav1.Now()
			tc.q.IP, tc.q.Since = "10.11.0.3", metav1.Now()
			cur.Status.InFlight = []ippoolv1.InFlightAddress{tc.entry}
			cur.Status.KeptForReturn = []ippoolv1.KeptAddress{tc.kept}
			cur.Status.Quarantined = []ippoolv1.QuarantinedAddress{tc.q}
			err := k.Status().Update(ctx, &cur)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}
