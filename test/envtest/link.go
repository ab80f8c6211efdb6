package envtest

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Link is a simulated node's connection to the API server: a TCP proxy
// that carries traffic while the node's simulated eth0 is up in its live
// state (an uncommitted apply included), and cuts every connection, and
// refuses new ones, while it is down. A policy that takes eth0 down cuts
// the node off as it would a real one.
type Link struct {
	// Config reaches the API server through the link.
	Config *rest.Config

	node   *Node
	ln     net.Listener
	target string
	done   chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// NewLink starts a link of node to the API server of cfg until Close.
func NewLink(node *Node, cfg *rest.Config) (*Link, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{node: node, ln: ln, target: u.Host, done: make(chan struct{}), conns: map[net.Conn]bool{}}
	l.Config = rest.CopyConfig(cfg)
	l.Config.Host = "https://" + ln.Addr().String()
	go l.accept()
	go l.watch()
	return l, nil
}

// Close stops the link.
func (l *Link) Close() error {
	close(l.done)
	err := l.ln.Close()
	l.cut()
	return err
}

// up reports whether the node's eth0 is up.
func (l *Link) up() bool {
	return InterfaceState(l.node, "eth0") == "up"
}

// InterfaceState returns the state of an interface in the node's live
// simulated network ("up", "down"), or "" if it has none.
func InterfaceState(node *Node, iface string) string {
	raw, err := node.Network.Runner.Show(context.Background())
	if err != nil {
		return ""
	}
	var s struct {
		Interfaces []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"interfaces"`
	}
	if yaml.Unmarshal(raw, &s) != nil {
		return ""
	}
	for _, i := range s.Interfaces {
		if i.Name == iface {
			return i.State
		}
	}
	return ""
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.up() {
			_ = c.Close()
			continue
		}
		go l.carry(c)
	}
}

func (l *Link) carry(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		_ = c.Close()
		return
	}
	l.mu.Lock()
	l.conns[c], l.conns[up] = true, true
	l.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

// watch cuts the open connections whenever eth0 is seen down.
func (l *Link) watch() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			if !l.up() {
				l.cut()
			}
		}
	}
}

func (l *Link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		_ = c.Close()
	}
}
