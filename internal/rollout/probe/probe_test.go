package probe

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/test/dnsserver"
)

func TestBeforeKeepsConditionalProbesThatPass(t *testing.T) {
	fail := func(context.Context) error { return errors.New("no") }
	pass := func(context.Context) error { return nil }
	s := Set{Probes: []Probe{
		{Name: "always", Check: fail},
		{Name: "passes", Check: pass, Conditional: true},
		{Name: "fails", Check: fail, Conditional: true},
		{Name: "hangs", Conditional: true, Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	}, BeforeTimeout: 100 * time.Millisecond}
	got := strings.Join(Names(s.Before(context.Background())), ",")
	if got != "always,passes" {
		t.Errorf("Before = %s, want always,passes", got)
	}
}

func TestAfterPollsUntilPassOrTimeout(t *testing.T) {
	var calls atomic.Int32
	third := Probe{Name: "third", Check: func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}}
	never := Probe{Name: "never", Check: func(context.Context) error { return errors.New("gateway gone") }}
	s := Set{Interval: 10 * time.Millisecond, Timeout: 200 * time.Millisecond}
	if err := s.After(context.Background(), []Probe{third}); err != nil || calls.Load() != 3 {
		t.Fatalf("After = %v after %d polls, want nil after 3", err, calls.Load())
	}
	err := s.After(context.Background(), []Probe{third, never})
	var f *Failure
	if !errors.As(err, &f) || f.Probe != "never" || !strings.Contains(err.Error(), "probe never failed: gateway gone") {
		t.Fatalf("After = %v, want the never probe's failure with what it saw", err)
	}
}

const nodeState = `
routes:
  running:
  - {destination: 10.0.0.0/8, next-hop-address: 10.1.1.1, next-hop-interface: eth1, table-id: 254}
  - {destination: 0.0.0.0/0, next-hop-address: 10.9.9.9, next-hop-interface: eth1, table-id: 100}
  - {destination: "::/0", next-hop-address: "fd00::1", next-hop-interface: eth0, table-id: 254}
  - {destination: 0.0.0.0/0, next-hop-address: 192.168.122.1, next-hop-interface: eth0, table-id: 254}
dns-resolver:
  running:
    server: [192.168.122.1, "fd00::53", bogus]
`

func TestStateParsing(t *testing.T) {
	hop, err := DefaultGateway([]byte(nodeState))
	if err != nil || hop != netip.MustParseAddr("192.168.122.1") {
		t.Errorf("DefaultGateway = %v, %v; want the main table's IPv4 gateway", hop, err)
	}
	v6only := strings.ReplaceAll(nodeState, "{destination: 0.0.0.0/0, next-hop-address: 192.168.122.1, next-hop-interface: eth0, table-id: 254}", "")
	if hop, err := DefaultGateway([]byte(v6only)); err != nil || hop != netip.MustParseAddr("fd00::1") {
		t.Errorf("DefaultGateway without an IPv4 default = %v, %v", hop, err)
	}
	if _, err := DefaultGateway([]byte("routes: {running: []}")); err == nil {
		t.Error("a state without a default route has a gateway")
	}
	ns, err := Nameservers([]byte(nodeState))
	if err != nil || len(ns) != 2 {
		t.Errorf("Nameservers = %v, %v", ns, err)
	}
	if _, err := Nameservers([]byte("{}")); err == nil || !strings.Contains(err.Error(), "no running nameserver") {
		t.Errorf("Nameservers of an empty state = %v", err)
	}
}

func show(state string) Show {
	return func(context.Context) ([]byte, error) { return []byte(state), nil }
}

func TestPing(t *testing.T) {
	ctx := context.Background()
	if err := ICMPPing(ctx, netip.MustParseAddr("127.0.0.1")); err != nil {
		if strings.Contains(err.Error(), "open an ICMP socket") {
			t.Skipf("this machine allows no ICMP socket to this user: %v", err)
		}
		t.Fatalf("ping 127.0.0.1: %v", err)
	}
	p := Ping(show("routes: {running: [{destination: 0.0.0.0/0, next-hop-address: 127.0.0.1, table-id: 254}]}"), ICMPPing)
	if err := p.Check(ctx); err != nil {
		t.Errorf("ping probe of a gateway that answers: %v", err)
	}
	// TEST-NET-2 (RFC 5737) never answers.
	silent := Ping(show("routes: {running: [{destination: 0.0.0.0/0, next-hop-address: 198.51.100.7}]}"), ICMPPing)
	if err := silent.Check(ctx); err == nil || !strings.Contains(err.Error(), "198.51.100.7") {
		t.Errorf("ping probe of a silent gateway = %v", err)
	}
	if err := Ping(show("routes: {running: []}"), ICMPPing).Check(ctx); err == nil ||
		!strings.Contains(err.Error(), "no default route") {
		t.Errorf("ping probe without a default route = %v", err)
	}
}

func TestDNS(t *testing.T) {
	srv, err := dnsserver.Start("127.0.0.1:0", DefaultDNSHost)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The first nameserver is silent (nothing listens on 127.0.0.2 at the
	// port); the second answers.
	p := DNS(show("dns-resolver: {running: {server: [127.0.0.2, 127.0.0.1]}}"), DefaultDNSHost, srv.Port())
	if err := p.Check(ctx); err != nil {
		t.Errorf("dns probe with one answering nameserver: %v", err)
	}
	if err := DNS(show("dns-resolver: {running: {server: [127.0.0.1]}}"), "example.invalid", srv.Port()).Check(ctx); err == nil {
		t.Error("dns probe of a name the server does not know passed")
	}
	if err := DNS(show("dns-resolver: {running: {server: []}}"), DefaultDNSHost, srv.Port()).Check(ctx); err == nil ||
		!strings.Contains(err.Error(), "no running nameserver") {
		t.Errorf("dns probe without a nameserver = %v", err)
	}
}

func TestSelect(t *testing.T) {
	all := []Probe{{Name: "ping"}, {Name: "dns"}, {Name: "api-server"}}
	got, err := Select(all, []string{"api-server", " ping"})
	if err != nil || strings.Join(Names(got), ",") != "ping,api-server" {
		t.Errorf("Select = %v, %v", Names(got), err)
	}
	if got, err := Select(all, []string{""}); err != nil || len(got) != 0 {
		t.Errorf("Select of none = %v, %v", Names(got), err)
	}
	if _, err := Select(all, []string{"ping", "pong"}); err == nil || err.Error() != "unknown probes pong; known: ping, dns, api-server" {
		t.Errorf("Select of an unknown probe = %v", err)
	}
}
