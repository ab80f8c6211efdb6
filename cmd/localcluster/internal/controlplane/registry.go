package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// startRegistry starts the cluster's image registry on the host's
// bridge address, serving the image tarballs of make images-local, and
// waits until it serves them all: the nodes pull their images from it, as
// nodes of a cluster pull from a registry.
func (c *cluster) startRegistry(ctx context.Context) error {
	addr := net.JoinHostPort(state.RealHostIP, state.RealRegistryPort)
	p := &process.Process{Binary: filepath.Join(c.Real.Images, state.RegistryTool), Log: c.Path("logs", "registry.log"),
		Args: []string{"-serve", addr, "-out", c.Real.Images}}
	if err := c.Launch(state.RegistryName, p); err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, func(ctx context.Context) error {
		for _, ref := range []string{"nmstate-ippool/handler/manifests/local", "nmstate-ippool/pool-controller/manifests/local", "pause/manifests/3.10"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+addr+"/v2/"+ref, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", ref, resp.Status)
			}
		}
		return nil
	})
}
