package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// production are the images an install runs (deploy/handler,
// deploy/pool-controller), as the Dockerfile builds them: the handler on
// a base that carries nmstatectl, the pool controller's static binary on
// an empty base, as a non-root user.
var production = []image{
	{ref: "handler", binaries: map[string]string{"/usr/local/bin/handler": "handler"},
		entrypoint: []string{"/usr/local/bin/handler"}},
	{ref: "pool-controller", binaries: map[string]string{"/usr/local/bin/pool-controller": "pool-controller"},
		entrypoint: []string{"/usr/local/bin/pool-controller"}, user: "65532:65532"},
}

// baseAdvice says which images a handler base may be.
const baseAdvice = "give an image with nmstate installed, such as one built FROM quay.io/centos/centos:stream9 with " +
	"'dnf install -y nmstate', or kubernetes-nmstate's handler image"

// errNoNmstatectl says a handler base cannot apply anything.
var errNoNmstatectl = errors.New("carries no nmstatectl (in /usr/bin or /usr/local/bin): the handler could apply nothing; " + baseAdvice)

// push builds the production images from the static binaries in bin and
// pushes them as <registry>/handler:<tag> and
// <registry>/pool-controller:<tag>, with the credentials of the Docker
// config (~/.docker/config.json, as docker login and crane auth login
// write it). handlerBase is the image the handler is added to. only, if
// not empty, names the images to push: companion mode runs only the pool
// controller, and needs no handler base. It returns the references
// pushed, by digest.
func push(registry, tag, handlerBase, bin, arch string, only []string, opts ...remote.Option) ([]string, error) {
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	built, err := buildProduction(registry, tag, handlerBase, bin, arch, only, opts)
	if err != nil {
		return nil, err
	}
	var pushed []string
	for _, b := range built {
		if err := remote.Write(b.ref, b.img, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", b.ref, err)
		}
		pushed = append(pushed, b.ref.String()+"@"+b.digest.String())
	}
	return pushed, nil
}

// save builds the production images as push does, named as push would
// push them, and writes each as an image tarball <name>.tar in dir
// (docker load, ctr images import and crane push take it), for a release
// whose images are pushed later or carried to an air-gapped registry. It
// returns the files written, with the reference and digest of each.
func save(dir, registry, tag, handlerBase, bin, arch string, only []string, opts ...remote.Option) ([]string, error) {
	opts = append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	built, err := buildProduction(registry, tag, handlerBase, bin, arch, only, opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var saved []string
	for _, b := range built {
		file := filepath.Join(dir, path.Base(b.ref.RepositoryStr())+".tar")
		if err := tarball.WriteToFile(file, b.ref, b.img); err != nil {
			return nil, fmt.Errorf("write %s: %w", file, err)
		}
		saved = append(saved, file+" "+b.ref.String()+"@"+b.digest.String())
	}
	return saved, nil
}

// builtImage is a production image and the reference it is published
// under.
type builtImage struct {
	ref    name.Tag
	img    v1.Image
	digest v1.Hash
}

// buildProduction builds the production images named by only (all if
// empty) from the binaries in bin, tagged <registry>/<image>:<tag>.
func buildProduction(registry, tag, handlerBase, bin, arch string, only []string, opts []remote.Option) ([]builtImage, error) {
	if registry == "" || tag == "" {
		return nil, errors.New("a registry and a tag are needed (REGISTRY=registry.example.com/nmstate-ippool TAG=v0.1.0)")
	}
	for _, n := range only {
		if !slices.ContainsFunc(production, func(im image) bool { return im.ref == n }) {
			return nil, fmt.Errorf("no image %q: name handler, pool-controller or both", n)
		}
	}
	var which []image
	for _, im := range production {
		if len(only) == 0 || slices.Contains(only, im.ref) {
			which = append(which, im)
		}
	}
	var base v1.Image
	if slices.ContainsFunc(which, func(im image) bool { return im.ref == "handler" }) {
		var err error
		if base, err = handlerBaseImage(handlerBase, arch, opts); err != nil {
			return nil, err
		}
	}
	var built []builtImage
	for _, im := range which {
		from := v1.Image(empty.Image)
		if im.ref == "handler" {
			from = base
		}
		img, err := assemble(im, from, bin, arch)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.ref, err)
		}
		ref, err := name.NewTag(strings.TrimSuffix(registry, "/") + "/" + im.ref + ":" + tag)
		if err != nil {
			return nil, err
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		built = append(built, builtImage{ref: ref, img: img, digest: digest})
	}
	return built, nil
}

// handlerBaseImage pulls the handler's base for arch and checks that it
// carries nmstatectl.
func handlerBaseImage(handlerBase, arch string, opts []remote.Option) (v1.Image, error) {
	if handlerBase == "" {
		return nil, errors.New("no handler base image (HANDLER_BASE): the handler is added to an image that carries nmstatectl; " + baseAdvice)
	}
	baseRef, err := name.ParseReference(handlerBase)
	if err != nil {
		return nil, fmt.Errorf("handler base %q: %w", handlerBase, err)
	}
	// Of a multi-platform base, the image of the binaries' platform.
	base, err := remote.Image(baseRef, append(opts, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))...)
	if err != nil {
		return nil, fmt.Errorf("pull the handler base %s: %w", handlerBase, err)
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("handler base %s: %w", handlerBase, err)
	}
	if cfg.Architecture != "" && cfg.Architecture != arch {
		return nil, fmt.Errorf("handler base %s is for %s, the binaries for %s: give a base for %s, or build for %s (ARCH=%s)",
			handlerBase, cfg.Architecture, arch, arch, cfg.Architecture, cfg.Architecture)
	}
	if err := hasNmstatectl(base); err != nil {
		return nil, fmt.Errorf("handler base %s %w", handlerBase, err)
	}
	return base, nil
}

// hasNmstatectl returns errNoNmstatectl unless img's file system has an
// nmstatectl where the handler looks for it (its PATH).
func hasNmstatectl(img v1.Image) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return errNoNmstatectl
		}
		if err != nil {
			return fmt.Errorf("cannot be read: %w", err)
		}
		p := path.Clean("/" + hdr.Name)
		if (p == "/usr/bin/nmstatectl" || p == "/usr/local/bin/nmstatectl") && hdr.Typeflag != tar.TypeDir {
			return nil
		}
	}
}
