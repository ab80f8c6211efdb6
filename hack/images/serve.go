package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
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

// seed pushes the image tarballs to the registry at addr and returns
// what it pushed.
func seed(addr, dir string) ([]string, error) {
	var pushed []string
	for _, im := range images {
		local, err := name.ParseReference(im.ref)
		if err != nil {
			return nil, err
		}
		tag, ok := local.(name.Tag)
		if !ok {
			return nil, fmt.Errorf("%s: not a tag", im.ref)
		}
		img, err := tarball.ImageFromPath(filepath.Join(dir, im.file), &tag)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (run make images-local)", im.file, err)
		}
		// containerd takes localhost for a registry, as Docker does;
		// go-containerregistry's parser, for a repository of Docker Hub.
		repo := strings.TrimPrefix(tag.RepositoryStr(), "localhost/")
		ref, err := name.NewTag(addr+"/"+repo+":"+tag.TagStr(), name.Insecure)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(ref, img); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		pushed = append(pushed, ref.String())
	}
	if len(pushed) == 0 {
		return nil, errors.New("no images")
	}
	return pushed, nil
}
