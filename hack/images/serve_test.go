package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeTheLocalImages builds the local cluster's image tarballs,
// serves them as localcluster does for its real nodes, and pulls each as
// a node's containerd asks for it through its mirror: the repository and
// tag without the registry, with the digest of the tarball's image. A
// build under another tag (-tag old) beside it is served too, under that
// tag.
func TestServeTheLocalImages(t *testing.T) {
	bin := fakeBinaries(t, "handler", "nmstatectl-sim", "pool-controller", "pause")
	dir := t.TempDir()
	digests := map[string]string{}
	build := func(ims []image, bin string) {
		for _, im := range ims {
			d, err := build(im, bin, filepath.Join(dir, im.file))
			if err != nil {
				t.Fatal(err)
			}
			digests[im.ref] = d.String()
		}
	}
	build(tagged(""), bin)
	old := fakeBinaries(t, "handler", "nmstatectl-sim", "pool-controller")
	if err := os.WriteFile(filepath.Join(old, "handler"), []byte("#!an earlier handler"), 0o755); err != nil {
		t.Fatal(err)
	}
	build(tagged("old"), old)
	if len(digests) != 5 || digests["localhost/nmstate-ippool/handler:old"] == digests["localhost/nmstate-ippool/handler:local"] {
		t.Fatalf("built %v; want the three local images, and the handler (another build) and pool controller under tag old", digests)
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
		addr + "/nmstate-ippool/handler:old":           digests["localhost/nmstate-ippool/handler:old"],
		addr + "/nmstate-ippool/pool-controller:old":   digests["localhost/nmstate-ippool/pool-controller:old"],
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
