// Package dnsserver runs a small DNS server for tests of the dns probe: it
// answers NS queries for the names it is given, and nothing else.
package dnsserver

import (
	"net"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers NS queries on a UDP socket until Close.
type Server struct {
	conn  net.PacketConn
	names map[string]bool
}

// Start listens on addr ("127.0.0.1:0" for any free port) and answers NS
// queries for names with one NS record each; queries of other names get
// NXDOMAIN.
func Start(addr string, names ...string) (*Server, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{conn: conn, names: map[string]bool{}}
	for _, n := range names {
		s.names[strings.TrimSuffix(n, ".")+"."] = true
	}
	go s.serve()
	return s, nil
}

// Port returns the port the server listens on.
func (s *Server) Port() string {
	_, port, _ := net.SplitHostPort(s.conn.LocalAddr().String())
	return port
}

// Close stops the server.
func (s *Server) Close() error { return s.conn.Close() }

func (s *Server) serve() {
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(reply, from)
		}
	}
}

func (s *Server) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	h.Response, h.Authoritative = true, true
	known := s.names[q.Name.String()] && q.Type == dnsmessage.TypeNS
	if !known {
		h.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if known {
		ns := dnsmessage.MustNewName("a." + q.Name.String())
		if b.NSResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.NSResource{NS: ns}) != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
