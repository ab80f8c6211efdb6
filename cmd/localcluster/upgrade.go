package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/controlplane"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/poolcontroller"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// cmdUpgrade runs "upgrade --bin DIR [--crd-dir DIR]": the CRDs, then the
// pool controller, then every running node's handler, one at a time, move
// to the programs of DIR.
func cmdUpgrade(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var bin, crdDir string
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&bin, "bin", "", "directory of the handler, pool-controller and nmstatectl-sim to upgrade (or downgrade) to")
		fs.StringVar(&crdDir, "crd-dir", "", "the CRD files to install first (default: this version's own)")
	}
	return withCluster(args, "upgrade", stderr, flags, func(c *state.Cluster, _ []string) error {
		if bin == "" {
			return fmt.Errorf("%w: upgrade needs --bin, the directory of the programs to run", cli.ErrUsage)
		}
		if c.Real != nil {
			return errors.New("real nodes run the install's pods: upgrade the install (kubectl apply of the new release, or helm upgrade)")
		}
		var err error
		if bin, err = filepath.Abs(bin); err != nil {
			return err
		}
		for _, p := range []string{"handler", "pool-controller", "nmstatectl-sim"} {
			if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
				return fmt.Errorf("%w: --bin %s has no %s", cli.ErrUsage, bin, p)
			}
		}
		if crdDir != "" {
			if crdDir, err = filepath.Abs(crdDir); err != nil {
				return err
			}
		}
		return upgrade(ctx, c, bin, crdDir, stdout)
	})
}

// upgrade rolls the cluster to the programs of bin and the CRDs of crdDir
// (this version's when empty), in an admin's order.
func upgrade(ctx context.Context, c *state.Cluster, bin, crdDir string, out io.Writer) error {
	// The cluster records the CRDs it runs only once they are installed:
	// a restore installs them again from there.
	previous := c.CRDDir
	c.CRDDir = crdDir
	if err := state.Step(out, "CRDs", func() error { return controlplane.InstallCRDs(ctx, c) }); err != nil {
		c.CRDDir = previous
		return err
	}
	c.Bin = bin
	return restartComponents(ctx, c, out)
}

// restartComponents restarts the cluster's own components, as a rollout
// does: the pool controller's replicas, then each running node's handler,
// one at a time, each ready before the next.
func restartComponents(ctx context.Context, c *state.Cluster, out io.Writer) error {
	if err := replacePoolController(ctx, c, out); err != nil {
		return err
	}
	if c.Handler == state.HandlerUpstream {
		fmt.Fprintln(out, "the nodes run kubernetes-nmstate's handler, which is not restarted here")
		return nil
	}
	k, err := c.Client()
	if err != nil {
		return err
	}
	h := handlers.For(c)
	for _, node := range c.PoweredOn() {
		err := state.Step(out, state.HandlerName(node), func() error {
			if err := h.Stop(ctx, k, node, false); err != nil {
				return err
			}
			return h.Start(ctx, k, node)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// replacePoolController restarts the pool controller, where the cluster
// runs one (not beside kubernetes-nmstate's handler outside companion
// mode).
func replacePoolController(ctx context.Context, c *state.Cluster, out io.Writer) error {
	if c.Handler == state.HandlerUpstream && !c.Companion {
		return nil
	}
	return state.Step(out, "pool-controller", func() error { return poolcontroller.Replace(ctx, c) })
}
