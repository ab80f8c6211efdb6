// Command images builds the container images the local cluster's real
// nodes run, without a Docker engine: each is one layer of static Go
// binaries on an empty base, written as an image tarball that `ctr images
// import` takes. The production images are the Dockerfile's; these differ
// in that the handler carries nmstatectl-sim instead of nmstatectl.
//
//	images -bin DIR -out DIR
//
// DIR holds the static binaries handler, nmstatectl-sim, pool-controller
// and pause (make images-local builds them with CGO_ENABLED=0).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// image is one image to build: its reference, the binaries it carries (by
// their path in the image) and how it runs.
type image struct {
	file       string
	ref        string
	binaries   map[string]string // path in the image -> name in -bin
	entrypoint []string
	user       string
}

// Images are what deploy/local names, and the sandbox image the nodes'
// containerd is configured with.
var images = []image{
	{file: "handler.tar", ref: "localhost/nmstate-ippool/handler:local",
		binaries:   map[string]string{"/usr/local/bin/handler": "handler", "/usr/local/bin/nmstatectl-sim": "nmstatectl-sim"},
		entrypoint: []string{"/usr/local/bin/handler"}},
	{file: "pool-controller.tar", ref: "localhost/nmstate-ippool/pool-controller:local",
		binaries:   map[string]string{"/usr/local/bin/pool-controller": "pool-controller"},
		entrypoint: []string{"/usr/local/bin/pool-controller"}, user: "65532:65532"},
	{file: "pause.tar", ref: "registry.k8s.io/pause:3.10",
		binaries: map[string]string{"/pause": "pause"}, entrypoint: []string{"/pause"}, user: "65535:65535"},
}

func main() {
	bin := flag.String("bin", "", "directory of the static binaries")
	out := flag.String("out", "", "directory to write the image tarballs into")
	flag.Parse()
	if *bin == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: images -bin DIR -out DIR")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	for _, im := range images {
		digest, err := build(im, *bin, filepath.Join(*out, im.file))
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: image %s: %v\n", im.ref, err)
			os.Exit(1)
		}
		fmt.Printf("%-50s %s  %s\n", im.ref, digest.String()[:19], filepath.Join(*out, im.file))
	}
}

// build writes one image as a tarball and returns its digest.
func build(im image, bin, file string) (v1.Hash, error) {
	files := map[string][]byte{}
	for dst, src := range im.binaries {
		raw, err := os.ReadFile(filepath.Join(bin, src))
		if err != nil {
			return v1.Hash{}, err
		}
		files[dst] = raw
	}
	layer, err := binariesLayer(files)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return v1.Hash{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = im.entrypoint
	cfg.Config.User = im.user
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return v1.Hash{}, err
	}
	ref, err := name.ParseReference(im.ref)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(file, ref, img); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// binariesLayer is a layer of executables owned by root, with their
// parent directories and a world-writable /tmp. The layer's tar stream
// comes from archive/tar; go-containerregistry compresses and hashes it.
func binariesLayer(files map[string][]byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	addDir := func(dir string, mode int64) error {
		if dir == "/" || dir == "." || dirs[dir] {
			return nil
		}
		dirs[dir] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir[1:] + "/", Mode: mode, ModTime: epoch})
	}
	if err := addDir("/tmp", 0o1777); err != nil {
		return nil, err
	}
	for _, dst := range sortedKeys(files) {
		for _, dir := range parents(dst) {
			if err := addDir(dir, 0o755); err != nil {
				return nil, err
			}
		}
		raw := files[dst]
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: dst[1:], Mode: 0o755, Size: int64(len(raw)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(raw); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
}

// parents returns the directories above p, outermost first.
func parents(p string) []string {
	var out []string
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		out = append([]string{dir}, out...)
	}
	return out
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
