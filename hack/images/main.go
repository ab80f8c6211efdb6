// Command images builds the container images the local cluster's real
// nodes run, without a Docker engine: each is one layer of static Go
// binaries on an empty base, written as an image tarball that `ctr images
// import` takes. The production images are the Dockerfile's; these differ
// in that the handler carries nmstatectl-sim instead of nmstatectl.
//
//	images -bin DIR -out DIR
//
// DIR holds the static binaries handler, nmstatectl-sim, pool-controller
// and pause (make images-local builds them with CGO_ENABLED=0). With
// -tag TAG as well, it writes the handler and pool controller images
// under that tag instead of "local", as handler-TAG.tar and
// pool-controller-TAG.tar: another build beside this one, served by the
// same registry (the real-node upgrade test's earlier version).
//
// With -push it builds the production images instead, as the Dockerfile
// does but with no Docker engine, and pushes them to any OCI registry
// (make push):
//
//	images -bin DIR -push REGISTRY -tag TAG -handler-base IMAGE
//
// the handler added to IMAGE, which must carry nmstatectl; the pool
// controller on an empty base, as a non-root user. With -save DIR as
// well, it writes them as image tarballs into DIR instead, named as they
// would be pushed (make release).
//
// With -serve it runs a registry of the local cluster's image tarballs
// for the real nodes to pull from (localcluster up --kubelets starts it):
//
//	images -serve ADDR -out DIR
//
// It serves every image tarball in DIR, under the tags the tarball names.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
	out := flag.String("out", "", "directory to write the local cluster's image tarballs into")
	registry := flag.String("push", "", "instead: push the production images to this registry (registry.example.com/nmstate-ippool)")
	tag := flag.String("tag", "", "with -push: the images' tag; with -out: the local images' tag (default "+localTag+")")
	handlerBase := flag.String("handler-base", "", "with -push: the image the handler is added to, which must carry nmstatectl")
	arch := flag.String("arch", runtime.GOARCH, "with -push: the architecture the binaries were built for")
	only := flag.String("images", "", "with -push: the images to push, comma-separated (default: handler,pool-controller)")
	saveDir := flag.String("save", "", "with -push: write the production images as image tarballs into this directory instead of pushing them (make release)")
	addr := flag.String("serve", "", "instead: serve the tarballs in -out from a registry on this address, until killed")
	flag.Parse()
	if *addr != "" && *out != "" && *bin == "" && *registry == "" {
		if err := serve(context.Background(), *addr, *out, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		return
	}
	if *bin == "" || (*out == "") == (*registry == "") || (*saveDir != "" && *registry == "") || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: images -bin DIR -out DIR\n       images -bin DIR -push REGISTRY -tag TAG -handler-base IMAGE [-save DIR]\n       images -serve ADDR -out DIR")
		os.Exit(2)
	}
	if *registry != "" {
		var names []string
		if *only != "" {
			names = strings.Split(*only, ",")
		}
		verb, publish := "pushed", func() ([]string, error) { return push(*registry, *tag, *handlerBase, *bin, *arch, names) }
		if *saveDir != "" {
			verb, publish = "wrote", func() ([]string, error) { return save(*saveDir, *registry, *tag, *handlerBase, *bin, *arch, names) }
		}
		done, err := publish()
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		for _, what := range done {
			fmt.Println(verb, what)
		}
		return
	}
	if err := buildLocal(*bin, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// buildLocal writes the local cluster's image tarballs under tag (see
// tagged) into out, from the binaries in bin, and prints each.
func buildLocal(bin, out, tag string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, im := range tagged(tag) {
		digest, err := build(im, bin, filepath.Join(out, im.file))
		if err != nil {
			return fmt.Errorf("image %s: %w", im.ref, err)
		}
		fmt.Printf("%-50s %s  %s\n", im.ref, digest.String()[:19], filepath.Join(out, im.file))
	}
	return nil
}

// localTag is the tag of the images deploy/local names.
const localTag = "local"

// tagged returns the local cluster's images as make images-local builds
// them (tag "" or localTag), or, under another tag, the images that
// deploy/local names, retagged and with that tag in their file's name.
func tagged(tag string) []image {
	if tag == "" || tag == localTag {
		return images
	}
	var out []image
	for _, im := range images {
		repo, ok := strings.CutSuffix(im.ref, ":"+localTag)
		if !ok {
			continue // the sandbox image has its own tag
		}
		im.ref = repo + ":" + tag
		im.file = strings.TrimSuffix(im.file, ".tar") + "-" + tag + ".tar"
		out = append(out, im)
	}
	return out
}

// build writes one image as a tarball and returns its digest.
func build(im image, bin, file string) (v1.Hash, error) {
	img, err := assemble(im, empty.Image, bin, runtime.GOARCH)
	if err != nil {
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

// assemble adds im's binaries to base as one layer, and im's entrypoint
// and user to its config. A base's environment is kept; without one, PATH
// is set.
func assemble(im image, base v1.Image, bin, arch string) (v1.Image, error) {
	files := map[string][]byte{}
	for dst, src := range im.binaries {
		raw, err := os.ReadFile(filepath.Join(bin, src))
		if err != nil {
			return nil, err
		}
		files[dst] = raw
	}
	layer, err := binariesLayer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.Entrypoint, cfg.Config.Cmd = im.entrypoint, nil
	cfg.Config.User = im.user
	if len(cfg.Config.Env) == 0 {
		cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	return mutate.ConfigFile(img, cfg)
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
