package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeTheLocalImages builds the local cluster's image tarballs,
// serves them as localcluster does for its real nodes, and pulls each as
// a node's containerd asks for it through its mirror: the repository and
// tag without the registry, with the digest of the tarball's image.
func TestServeTheLocalImages(t *testing.T) {
	bin := fakeBinaries(t, "handler", "nmstatectl-sim", "pool-controller", "pause")
	dir := t.TempDir()
	digests := map[string]string{}
	for _, im := range images {
		d, err := build(im, bin, filepath.Join(dir, im.file))
		if err != nil {
			t.Fatal(err)
		}
		digests[im.ref] = d.String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr, dir, logs) }()
	for ref, want := range map[string]string{
		addr + "/nmstate-ippool/handler:local":         digests["localhost/nmstate-ippool/handler:local"],
		addr + "/nmstate-ippool/pool-controller:local": digests["localhost/nmstate-ippool/pool-controller:local"],
		addr + "/pause:3.10":                           digests["registry.k8s.io/pause:3.10"],
	} {
		var got string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if strings.Contains(logs.String(), "serving "+ref) {
				d, err := pull(t, ref).Digest()
				if err != nil {
					t.Fatal(err)
				}
				got = d.String()
				break
			}
		}
		if got != want {
			t.Errorf("%s: digest %q, want the tarball's %s; the registry logged:\n%s", ref, got, want, logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a buffer the registry's goroutines write while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeWithoutTheTarballs says what to run.
func TestServeWithoutTheTarballs(t *testing.T) {
	err := serve(context.Background(), "127.0.0.1:0", t.TempDir(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "make images-local") {
		t.Fatalf("got %v", err)
	}
}
