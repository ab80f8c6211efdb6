package ippool

import (
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
)

type offsetCase struct {
	offset   uint64
	ip       string
	excluded bool
}

func TestRangeSeedExamples(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		size    uint64
		last    uint64
		offsets []offsetCase
	}{
		{
			// The specification's IPv4 /24 listing.
			name: "seed ipv4 /24",
			spec: Spec{CIDR: "10.10.11.0/24", Start: "10.10.11.4", End: "10.10.11.10", Exclude: []string{"10.10.11.5", "10.10.11.7"}},
			size: 5, last: 6,
			offsets: []offsetCase{
				{0, "10.10.11.4", false}, {1, "10.10.11.5", true}, {2, "10.10.11.6", false},
				{3, "10.10.11.7", true}, {4, "10.10.11.8", false}, {5, "10.10.11.9", false}, {6, "10.10.11.10", false},
			},
		},
		{
			// The specification's /16 listing with its CIDR written canonically.
			// Every address between start and end has an offset,
			// including x.255 and x.0 inside the /16, so .12.1 is 253, not 251.
			name: "seed ipv4 /16 with every address counted",
			spec: Spec{CIDR: "10.10.0.0/16", Start: "10.10.11.4", End: "10.10.12.10", Exclude: []string{"10.10.11.5", "10.10.12.7"}},
			size: 261, last: 262,
			offsets: []offsetCase{
				{0, "10.10.11.4", false}, {1, "10.10.11.5", true}, {250, "10.10.11.254", false},
				{251, "10.10.11.255", false}, {252, "10.10.12.0", false}, {253, "10.10.12.1", false},
				{259, "10.10.12.7", true}, {260, "10.10.12.8", false}, {262, "10.10.12.10", false},
			},
		},
		{
			// The specification's IPv6 /116 example. Its listing is off by one
			// after offset 1 (0x1f - 0x0f is 16, not 17); offset = ip - start
			// is the rule, and 0xff - 0x0f = 240 is the last offset.
			name: "seed ipv6 /116",
			spec: Spec{CIDR: "2001:4860:4860::/116", Start: "2001:4860:4860::000F", End: "2001:4860:4860::00FF",
				Exclude: []string{"2001:4860:4860::0010", "2001:4860:4860::001F"}},
			size: 239, last: 240,
			offsets: []offsetCase{
				{0, "2001:4860:4860::f", false}, {1, "2001:4860:4860::10", true}, {2, "2001:4860:4860::11", false},
				{16, "2001:4860:4860::1f", true}, {17, "2001:4860:4860::20", false}, {240, "2001:4860:4860::ff", false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := MustNewRange(tt.spec)
			if r.Size() != tt.size || r.Last() != tt.last {
				t.Fatalf("size %d last %d, want size %d last %d", r.Size(), r.Last(), tt.size, tt.last)
			}
			for _, c := range tt.offsets {
				assertOffset(t, r, c)
			}
		})
	}
}

func assertOffset(t *testing.T, r *Range, c offsetCase) {
	t.Helper()
	want := netip.MustParseAddr(c.ip)
	ip, err := r.IP(c.offset)
	if err != nil || ip != want {
		t.Errorf("IP(%d) = %v, %v; want %s", c.offset, ip, err, want)
	}
	o, err := r.Offset(want)
	if err != nil || o != c.offset {
		t.Errorf("Offset(%s) = %d, %v; want %d", want, o, err, c.offset)
	}
	if r.Excluded(c.offset) != c.excluded || r.Contains(want) == c.excluded {
		t.Errorf("offset %d (%s): excluded=%v contains=%v, want excluded=%v", c.offset, want, r.Excluded(c.offset), r.Contains(want), c.excluded)
	}
}

func TestRangeDefaultsAndReservedAddresses(t *testing.T) {
	tests := []struct {
		spec        Spec
		start, end  string
		size        uint64
		notAssigned []string
	}{
		{spec: Spec{CIDR: "10.0.0.0/24"}, start: "10.0.0.1", end: "10.0.0.254", size: 254},
		{spec: Spec{CIDR: "10.0.0.0/30"}, start: "10.0.0.1", end: "10.0.0.2", size: 2},
		{spec: Spec{CIDR: "10.0.0.0/31"}, start: "10.0.0.0", end: "10.0.0.1", size: 2},
		{spec: Spec{CIDR: "10.0.0.7/32"}, start: "10.0.0.7", end: "10.0.0.7", size: 1},
		{spec: Spec{CIDR: "2001:db8::/64"}, start: "2001:db8::1", end: "2001:db8::ffff:ffff:ffff:ffff", size: math.MaxUint64},
		{spec: Spec{CIDR: "2001:db8::/126"}, start: "2001:db8::1", end: "2001:db8::3", size: 3},
		{spec: Spec{CIDR: "2001:db8::/127"}, start: "2001:db8::", end: "2001:db8::1", size: 2},
		{spec: Spec{CIDR: "2001:db8::5/128"}, start: "2001:db8::5", end: "2001:db8::5", size: 1},
		// Explicit bounds on the network, broadcast and anycast addresses keep
		// them in the range but never hand them out.
		{spec: Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.0", End: "10.0.0.255"}, start: "10.0.0.0", end: "10.0.0.255", size: 254,
			notAssigned: []string{"10.0.0.0", "10.0.0.255"}},
		{spec: Spec{CIDR: "2001:db8::/120", Start: "2001:db8::", End: "2001:db8::ff"}, start: "2001:db8::", end: "2001:db8::ff", size: 255,
			notAssigned: []string{"2001:db8::"}},
		// An exclude CIDR may reach past either end of the range.
		{spec: Spec{CIDR: "10.10.10.0/24", Start: "10.10.10.1", End: "10.10.10.10", Exclude: []string{"10.10.10.4", "10.10.10.8/30"}},
			start: "10.10.10.1", end: "10.10.10.10", size: 6, notAssigned: []string{"10.10.10.4", "10.10.10.8", "10.10.10.10"}},
		{spec: Spec{CIDR: "10.10.10.0/24", Start: "10.10.10.2", End: "10.10.10.10", Exclude: []string{"10.10.10.0/30", "10.10.10.0/30"}},
			start: "10.10.10.2", end: "10.10.10.10", size: 7, notAssigned: []string{"10.10.10.2", "10.10.10.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.spec.CIDR+"/"+tt.spec.Start, func(t *testing.T) {
			r := MustNewRange(tt.spec)
			if r.Start().String() != tt.start || r.End().String() != tt.end || r.Size() != tt.size {
				t.Fatalf("got %s-%s size %d, want %s-%s size %d", r.Start(), r.End(), r.Size(), tt.start, tt.end, tt.size)
			}
			for _, s := range tt.notAssigned {
				if _, err := r.Assignable(netip.MustParseAddr(s)); !errors.Is(err, ErrExcluded) {
					t.Errorf("Assignable(%s) = %v, want ErrExcluded", s, err)
				}
			}
		})
	}
}

func TestNewRangeRejects(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"not a cidr", Spec{CIDR: "10.0.0.0"}, "not a CIDR"},
		{"host bits", Spec{CIDR: "10.0.0.1/24"}, "write 10.0.0.0/24"},
		{"ipv4-mapped cidr", Spec{CIDR: "::ffff:10.0.0.0/120"}, "IPv4-mapped"},
		{"bad start", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.300"}, "start: \"10.0.0.300\" is not an IP address"},
		{"ipv4-mapped start", Spec{CIDR: "10.0.0.0/24", Start: "::ffff:10.0.0.1"}, "write the IPv4 address 10.0.0.1"},
		{"zone", Spec{CIDR: "fe80::/64", Start: "fe80::1%eth0"}, "zones are not allowed"},
		{"start family", Spec{CIDR: "10.0.0.0/24", Start: "2001:db8::1"}, "different IP families"},
		{"start outside", Spec{CIDR: "10.0.0.0/24", Start: "10.0.1.1"}, "start 10.0.1.1 is outside cidr 10.0.0.0/24"},
		{"end outside", Spec{CIDR: "10.0.0.0/24", End: "10.0.1.1"}, "end 10.0.1.1 is outside cidr 10.0.0.0/24"},
		{"reversed", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.9", End: "10.0.0.3"}, "start 10.0.0.9 is after end 10.0.0.3"},
		{"start past default end", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.255"}, "start 10.0.0.255 is after end 10.0.0.254"},
		{"too large", Spec{CIDR: "2001:db8::/48"}, "more than 2^64 addresses"},
		{"exclude outside", Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.1.0/30"}}, "exclude 10.0.1.0/30 is outside cidr"},
		{"exclude wider than cidr", Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.0/16"}}, "exclude 10.0.0.0/16 is outside cidr"},
		{"exclude family", Spec{CIDR: "10.0.0.0/24", Exclude: []string{"2001:db8::1"}}, "different IP families"},
		{"exclude host bits", Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.9/30"}}, "write 10.0.0.8/30"},
		{"exclude garbage", Spec{CIDR: "10.0.0.0/24", Exclude: []string{"ten"}}, "not an IP address"},
		{"everything excluded", Spec{CIDR: "10.0.0.0/30", Exclude: []string{"10.0.0.1", "10.0.0.2"}}, "every address"},
		{"only reserved", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.0", End: "10.0.0.0"}, "every address"},
		{"gateway garbage", Spec{CIDR: "10.0.0.0/24", Gateway: "router"}, "gateway: \"router\" is not an IP address"},
		{"gateway outside", Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.1.1"}, "gateway 10.0.1.1 is outside cidr 10.0.0.0/24"},
		{"gateway family", Spec{CIDR: "10.0.0.0/24", Gateway: "2001:db8::1"}, "gateway 2001:db8::1 and cidr 10.0.0.0/24 are of different IP families"},
		{"gateway is the network", Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.0"}, "gateway 10.0.0.0 is the network, broadcast"},
		{"gateway is the broadcast", Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.255"}, "pick a host address"},
		{"gateway is the anycast", Spec{CIDR: "2001:db8::/64", Gateway: "2001:db8::"}, "subnet-router anycast"},
		{"only the gateway", Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.1", Gateway: "10.0.0.1"}, "every address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRange(tt.spec)
			if !errors.Is(err, ErrInvalidRange) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewRange(%+v) = %v, want ErrInvalidRange containing %q", tt.spec, err, tt.want)
			}
		})
	}
}

func TestGatewayIsNeverHandedOut(t *testing.T) {
	with := MustNewRange(Spec{CIDR: "10.0.0.0/29", Gateway: "10.0.0.1"})
	without := MustNewRange(Spec{CIDR: "10.0.0.0/29"})
	if got := with.Gateway(); got != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("Gateway() = %s", got)
	}
	if without.Gateway().IsValid() {
		t.Fatalf("a range without a gateway has gateway %s", without.Gateway())
	}
	if with.Size() != without.Size()-1 || with.Start() != without.Start() {
		t.Fatalf("size %d start %s, want %d and %s: the gateway is excluded, nothing moves", with.Size(), with.Start(), without.Size()-1, without.Start())
	}
	a := NewAllocator(with)
	var got []string
	for {
		off, err := a.AllocateNext()
		if errors.Is(err, ErrFull) {
			break
		}
		ip, _ := with.IP(off)
		got = append(got, ip.String())
	}
	if strings.Join(got, " ") != "10.0.0.2 10.0.0.3 10.0.0.4 10.0.0.5 10.0.0.6" {
		t.Fatalf("handed out %v", got)
	}
	if _, err := with.Assignable(netip.MustParseAddr("10.0.0.1")); !errors.Is(err, ErrExcluded) {
		t.Fatalf("Assignable(gateway) = %v, want ErrExcluded", err)
	}
	// A gateway outside start-end is on the subnet all the same.
	if _, err := NewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.10", Gateway: "10.0.0.1"}); err != nil {
		t.Fatalf("gateway below start: %v", err)
	}
}

func TestRangeOffsetErrors(t *testing.T) {
	r := MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.10", End: "10.0.0.20"})
	for _, s := range []string{"10.0.0.9", "10.0.0.21", "2001:db8::1", "::ffff:10.0.0.10"} {
		if _, err := r.Offset(netip.MustParseAddr(s)); !errors.Is(err, ErrNotInRange) {
			t.Errorf("Offset(%s) = %v, want ErrNotInRange", s, err)
		}
	}
	if _, err := r.IP(11); !errors.Is(err, ErrNotInRange) {
		t.Errorf("IP(11) = %v, want ErrNotInRange", err)
	}
}

func TestRangeLargestIPv6(t *testing.T) {
	// 2^64 addresses exactly: offsets use all 64 bits.
	r := MustNewRange(Spec{CIDR: "2001:db8::/48", Start: "2001:db8:0:1::", End: "2001:db8:0:1:ffff:ffff:ffff:ffff"})
	if r.Last() != math.MaxUint64 || r.Size() != math.MaxUint64 {
		t.Fatalf("last %d size %d", r.Last(), r.Size())
	}
	assertOffset(t, r, offsetCase{math.MaxUint64, "2001:db8:0:1:ffff:ffff:ffff:ffff", false})
	assertOffset(t, r, offsetCase{0, "2001:db8:0:1::", false})
	// A range crossing a /64 boundary but no larger than 2^64 is accepted.
	r = MustNewRange(Spec{CIDR: "2001:db8::/48", Start: "2001:db8:0:1::5", End: "2001:db8:0:2::4"})
	if r.Last() != math.MaxUint64 {
		t.Fatalf("last %d", r.Last())
	}
}

func TestRangeStringIgnoresSpelling(t *testing.T) {
	a := MustNewRange(Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.4", "10.0.0.5", "10.0.0.4/31"}})
	b := MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.254", Exclude: []string{"10.0.0.4/31"}})
	if a.String() != b.String() || a.fingerprint() != b.fingerprint() {
		t.Fatalf("%q != %q", a, b)
	}
	c := MustNewRange(Spec{CIDR: "10.0.0.0/24", Exclude: []string{"10.0.0.4"}})
	if a.fingerprint() == c.fingerprint() {
		t.Fatalf("different excludes, same fingerprint")
	}
}

func TestRangeOverlaps(t *testing.T) {
	a := MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.10"})
	b := MustNewRange(Spec{CIDR: "10.0.0.0/16", Start: "10.0.0.10", End: "10.0.1.10"})
	c := MustNewRange(Spec{CIDR: "10.0.0.0/24", Start: "10.0.0.11", End: "10.0.0.20"})
	d := MustNewRange(Spec{CIDR: "2001:db8::/120"})
	if !a.Overlaps(b) || !b.Overlaps(a) || a.Overlaps(c) || a.Overlaps(d) {
		t.Fatal("wrong overlap")
	}
}

func FuzzOffsetRoundTrip(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(7))
	f.Add(uint64(1)<<63, uint64(0), uint64(math.MaxUint64))
	f.Add(uint64(0), uint64(math.MaxUint64), uint64(math.MaxUint64))
	r4 := MustNewRange(Spec{CIDR: "10.0.0.0/8"})
	r6 := MustNewRange(Spec{CIDR: "2001:db8:1:2::/64", Start: "2001:db8:1:2::"})
	f.Fuzz(func(t *testing.T, hi, lo, offset uint64) {
		for _, r := range []*Range{r4, r6} {
			ip := u128{hi: hi, lo: lo}.addr(r.Start().Is4())
			if o, err := r.Offset(ip); err == nil {
				back, err := r.IP(o)
				if err != nil || back != ip {
					t.Fatalf("%s -> %d -> %s, %v", ip, o, back, err)
				}
			}
			if ip, err := r.IP(offset); err == nil {
				back, err := r.Offset(ip)
				if err != nil || back != offset {
					t.Fatalf("%d -> %s -> %d, %v", offset, ip, back, err)
				}
			} else if offset <= r.Last() {
				t.Fatalf("IP(%d) failed inside the range: %v", offset, err)
			}
		}
	})
}
