package main

import (
	"archive/tar"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestPushToARegistry pushes the production images to a registry served
// on localhost (go-containerregistry's), on a base that carries
// nmstatectl, and reads them back as a node's container runtime would.
func TestPushToARegistry(t *testing.T) {
	server := httptest.NewServer(registry.New())
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "http://")
	base := pushBase(t, host+"/base/nmstate:1", map[string]string{"/usr/bin/nmstatectl": "nmstatectl"})
	bin := fakeBinaries(t, "handler", "pool-controller")

	pushed, err := push(host+"/nmstate-ippool", "v0.0.1", base, bin, "amd64", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 2 || !strings.HasPrefix(pushed[0], host+"/nmstate-ippool/handler:v0.0.1@sha256:") ||
		!strings.HasPrefix(pushed[1], host+"/nmstate-ippool/pool-controller:v0.0.1@sha256:") {
		t.Fatalf("pushed %v", pushed)
	}

	handler := pull(t, host+"/nmstate-ippool/handler:v0.0.1")
	files := filesOf(t, handler)
	for _, f := range []string{"/usr/bin/nmstatectl", "/usr/local/bin/handler"} {
		if !files[f] {
			t.Errorf("the handler image lacks %s: %v", f, files)
		}
	}
	cfg, err := handler.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/local/bin/handler" || cfg.Config.User != "" {
		t.Errorf("handler: entrypoint %v, user %q; want the handler, as root (it drives NetworkManager)", got, cfg.Config.User)
	}
	if got := cfg.Config.Env; len(got) != 1 || got[0] != "PATH=/opt/base/bin:/usr/bin" {
		t.Errorf("handler: env %v; want the base's", got)
	}

	controller := pull(t, host+"/nmstate-ippool/pool-controller:v0.0.1")
	files = filesOf(t, controller)
	if !files["/usr/local/bin/pool-controller"] || files["/usr/bin/nmstatectl"] {
		t.Errorf("the pool controller image holds %v; want its binary on an empty base", files)
	}
	cfg, err = controller.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("pool controller: user %q, platform %s/%s; want 65532:65532 on linux/amd64", cfg.Config.User, cfg.OS, cfg.Architecture)
	}
}

// TestPushRefusals: what cannot make a working install is refused before
// anything is pushed, saying what to give instead.
func TestPushRefusals(t *testing.T) {
	server := httptest.NewServer(registry.New())
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "http://")
	bare := pushBase(t, host+"/base/bare:1", map[string]string{"/usr/bin/sh": "sh"})
	base := func() string {
		return pushBase(t, host+"/base/nmstate:1", map[string]string{"/usr/bin/nmstatectl": "nmstatectl"})
	}
	armBase := pushBaseFor(t, host+"/base/arm:1", "arm64", map[string]string{"/usr/bin/nmstatectl": "nmstatectl"})
	bin := fakeBinaries(t, "handler", "pool-controller")
	for _, c := range []struct {
		name, registry, tag, base, arch, want string
		only                                  []string
	}{
		{"no registry", "", "v1", bare, "amd64", "a registry and a tag are needed", nil},
		{"no tag", host + "/x", "", bare, "amd64", "a registry and a tag are needed", nil},
		{"no base", host + "/x", "v1", "", "amd64", "no handler base image (HANDLER_BASE)", nil},
		{"a base without nmstatectl", host + "/x", "v1", bare, "amd64", "carries no nmstatectl", nil},
		{"a base that does not exist", host + "/x", "v1", host + "/base/missing:1", "amd64", "pull the handler base", nil},
		{"a base for another architecture", host + "/x", "v1", armBase, "amd64", "is for arm64, the binaries for amd64", nil},
		{"an image that is not one", host + "/x", "v1", base(), "amd64", `no image "operator"`, []string{"operator"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := push(c.registry, c.tag, c.base, bin, c.arch, c.only)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
			if _, err := remote.Head(mustTag(t, host+"/x/handler:v1")); err == nil {
				t.Fatal("an image was pushed despite the refusal")
			}
		})
	}
}

// pushBase pushes an image of files (path → content) with a PATH of its
// own, and returns its reference.
func pushBase(t *testing.T, ref string, files map[string]string) string {
	t.Helper()
	return pushBaseFor(t, ref, "amd64", files)
}

// pushBaseFor is pushBase for an architecture.
func pushBaseFor(t *testing.T, ref, arch string, files map[string]string) string {
	t.Helper()
	raw := map[string][]byte{}
	for p, c := range files {
		raw[p] = []byte(c)
	}
	layer, err := binariesLayer(raw)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Env, cfg.Config.Cmd = []string{"PATH=/opt/base/bin:/usr/bin"}, []string{"/usr/bin/sh"}
	cfg.OS, cfg.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mustTag(t, ref), img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func fakeBinaries(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!"+n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustTag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

func pull(t *testing.T, ref string) v1.Image {
	t.Helper()
	img, err := remote.Image(mustTag(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// filesOf lists the regular files of img's file system.
func filesOf(t *testing.T, img v1.Image) map[string]bool {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	out := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			out[path.Clean("/"+hdr.Name)] = true
		}
	}
}

// TestPushPoolControllerOnly: companion mode runs only the pool
// controller, which needs no handler base.
func TestPushPoolControllerOnly(t *testing.T) {
	server := httptest.NewServer(registry.New())
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "http://")
	pushed, err := push(host+"/nmstate-ippool", "v0.0.1", "", fakeBinaries(t, "pool-controller"), "arm64", []string{"pool-controller"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 1 || !strings.HasPrefix(pushed[0], host+"/nmstate-ippool/pool-controller:v0.0.1@") {
		t.Fatalf("pushed %v", pushed)
	}
	if _, err := remote.Head(mustTag(t, host+"/nmstate-ippool/handler:v0.0.1")); err == nil {
		t.Fatal("a handler image was pushed")
	}
	cfg, err := pull(t, host+"/nmstate-ippool/pool-controller:v0.0.1").ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "arm64" {
		t.Fatalf("architecture %q, want the binaries' (arm64)", cfg.Architecture)
	}
}

// TestSaveWritesWhatPushWouldPush: a release's image tarballs hold the
// images push pushes, under the names it pushes them as, with the same
// digests, so that loading a tarball and pushing it later publishes the
// release's images.
func TestSaveWritesWhatPushWouldPush(t *testing.T) {
	server := httptest.NewServer(registry.New())
	defer server.Close()
	host := strings.TrimPrefix(server.URL, "http://")
	base := pushBase(t, host+"/base/nmstate:1", map[string]string{"/usr/bin/nmstatectl": "nmstatectl"})
	bin := fakeBinaries(t, "handler", "pool-controller")
	dir := t.TempDir()

	saved, err := save(dir, "registry.example.com/nmstate-ippool", "v0.0.1", base, bin, "amd64", nil)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := push(host+"/nmstate-ippool", "v0.0.1", base, bin, "amd64", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) != 2 {
		t.Fatalf("saved %v, want two images", saved)
	}
	for i, name := range []string{"handler", "pool-controller"} {
		ref := "registry.example.com/nmstate-ippool/" + name + ":v0.0.1"
		tag := mustTag(t, ref)
		img, err := tarball.ImageFromPath(filepath.Join(dir, name+".tar"), &tag)
		if err != nil {
			t.Fatalf("%s.tar does not hold %s: %v", name, ref, err)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if _, pushedDigest, _ := strings.Cut(pushed[i], "@"); digest.String() != pushedDigest {
			t.Errorf("%s: the tarball's image is %s, push pushed %s", name, digest, pushed[i])
		}
		if want := filepath.Join(dir, name+".tar") + " " + ref + "@" + digest.String(); saved[i] != want {
			t.Errorf("save reported %q, want %q", saved[i], want)
		}
	}
	if _, err := save(dir, "registry.example.com/nmstate-ippool", "v0.0.1", "", bin, "amd64", nil); err == nil ||
		!strings.Contains(err.Error(), "HANDLER_BASE") {
		t.Errorf("a handler image without a base: %v, want the refusal that names HANDLER_BASE", err)
	}
}
