package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Pinger sends one ICMP echo to addr and returns nil when it is answered
// before ctx ends.
type Pinger func(ctx context.Context, addr netip.Addr) error

// pingTimeout bounds one echo when ctx has no earlier deadline.
const pingTimeout = time.Second

// ICMPPing is the Pinger of a handler: an unprivileged ICMP socket where
// the kernel allows one (net.ipv4.ping_group_range), else a raw one, which
// needs CAP_NET_RAW (the handler runs privileged).
func ICMPPing(ctx context.Context, addr netip.Addr) error {
	conn, proto, err := listen(addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(pingTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	id, seq := os.Getpid()&0xffff, int(time.Now().UnixNano()&0xffff)
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if addr.Is6() {
		typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("nmstate-ippool probe")}}
	wire, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	dst := net.Addr(&net.IPAddr{IP: addr.AsSlice()})
	if _, udp := conn.LocalAddr().(*net.UDPAddr); udp {
		dst = &net.UDPAddr{IP: addr.AsSlice()}
	}
	if _, err := conn.WriteTo(wire, dst); err != nil {
		return fmt.Errorf("send an echo request: %w", err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply: %w", err)
		}
		got, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || got.Type != reply {
			continue
		}
		echo, ok := got.Body.(*icmp.Echo)
		// An unprivileged socket's kernel rewrites the ID; the sequence
		// and the sender tell the reply apart.
		if ok && echo.Seq == seq && sameHost(from, addr) {
			return nil
		}
	}
}

// listen opens an ICMP socket for addr's family, unprivileged if it can.
func listen(addr netip.Addr) (*icmp.PacketConn, int, error) {
	network, raw, any, proto := "udp4", "ip4:icmp", "0.0.0.0", 1
	if addr.Is6() {
		network, raw, any, proto = "udp6", "ip6:ipv6-icmp", "::", 58
	}
	conn, err := icmp.ListenPacket(network, any)
	if err == nil {
		return conn, proto, nil
	}
	conn, rawErr := icmp.ListenPacket(raw, any)
	if rawErr != nil {
		return nil, 0, fmt.Errorf("open an ICMP socket: %w", errors.Join(err, rawErr))
	}
	return conn, proto, nil
}

func sameHost(from net.Addr, addr netip.Addr) bool {
	var ip net.IP
	switch a := from.(type) {
	case *net.IPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == addr.Unmap()
}
