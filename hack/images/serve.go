package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// serve runs an OCI registry on addr (plain HTTP, in memory) holding the
// local cluster's images from the tarballs in dir, each under its
// repository and tag without its registry (nmstate-ippool/handler:local,
// pause:3.10): the real nodes' containerd pulls them through a mirror of
// localhost and registry.k8s.io, as nodes pull from a registry. It
// returns when ctx ends, or on the first error.
func serve(ctx context.Context, addr, dir string, logs io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(logs, "", log.LstdFlags))), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() { _ = srv.Close() }()
	pushed, err := seed(l.Addr().String(), dir)
	if err != nil {
		return err
	}
	for _, ref := range pushed {
		fmt.Fprintln(logs, "serving", ref)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		return nil
	}
}

// seed pushes every image tarball in dir to the registry at addr, under
// each tag the tarball names, and returns what it pushed.
func seed(addr, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	var pushed []string
	for _, file := range files {
		manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w (run make images-local)", file, err)
		}
		for _, d := range manifest {
			for _, repoTag := range d.RepoTags {
				ref, err := pushTarball(addr, file, repoTag)
				if err != nil {
					return nil, err
				}
				pushed = append(pushed, ref)
			}
		}
	}
	if len(pushed) == 0 {
		return nil, fmt.Errorf("no images in %s (run make images-local)", dir)
	}
	return pushed, nil
}

// pushTarball pushes the image of the tarball file tagged repoTag to the registry
// at addr, under its repository and tag without its registry, and returns
// where.
func pushTarball(addr, file, repoTag string) (string, error) {
	tag, err := name.NewTag(repoTag)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	// containerd takes localhost for a registry, as Docker does;
	// go-containerregistry's parser, for a repository of Docker Hub.
	repo := strings.TrimPrefix(tag.RepositoryStr(), "localhost/")
	ref, err := name.NewTag(addr+"/"+repo+":"+tag.TagStr(), name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}
