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

// cmdUpgrade runs "upgrade --bin DIR [--crd-dir DIR] [--pool-controller=false]
// [--handlers N]": the CRDs, then the pool controller, then every running
// node's handler, one at a time, move to the programs of DIR. With
// --pool-controller=false the pool controller keeps running what it runs,
// and with --handlers N only the first N running nodes' handlers move: the
// halfway points of a rollout (a DaemonSet's rolling update under way, or
// an install applied at once, whose parts restart in no order).
func cmdUpgrade(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		bin, crdDir string
		o           rollOptions
	)
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&bin, "bin", "", "directory of the handler, pool-controller and nmstatectl-sim to upgrade (or downgrade) to")
		fs.StringVar(&crdDir, "crd-dir", "", "the CRD files to install first (default: this version's own)")
		fs.BoolVar(&o.poolController, "pool-controller", true, "restart the pool controller with DIR's (false: it keeps running what it runs)")
		fs.IntVar(&o.handlers, "handlers", -1, "restart only the first N running nodes' handlers, in the order of their names, with DIR's "+
			"(-1: every node's); the others keep running what they run. Nodes started afterwards run DIR's")
	}
	return withCluster(args, "upgrade", stderr, flags, func(c *state.Cluster, _ []string) error {
		if bin == "" {
			return fmt.Errorf("%w: upgrade needs --bin, the directory of the programs to run", cli.ErrUsage)
		}
		if o.handlers < -1 {
			return fmt.Errorf("%w: --handlers %d: a number of nodes, or -1 for every node", cli.ErrUsage, o.handlers)
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
		return upgrade(ctx, c, bin, crdDir, o, stdout)
	})
}

// rollOptions say how far a roll to other programs goes.
type rollOptions struct {
	// poolController restarts the pool controller.
	poolController bool
	// handlers is how many running nodes' handlers are restarted, in
	// the order of their names; -1 for all.
	handlers int
}

// upgrade rolls the cluster to the programs of bin and the CRDs of crdDir
// (this version's when empty), in an admin's order, as far as o says.
func upgrade(ctx context.Context, c *state.Cluster, bin, crdDir string, o rollOptions, out io.Writer) error {
	// The cluster records the CRDs it runs only once they are installed:
	// a restore installs them again from there.
	previous := c.CRDDir
	c.CRDDir = crdDir
	if err := state.Step(out, "CRDs", func() error { return controlplane.InstallCRDs(ctx, c) }); err != nil {
		c.CRDDir = previous
		return err
	}
	c.Bin = bin
	return restartComponents(ctx, c, o, out)
}

// restartComponents restarts the cluster's own components, as a rollout
// does: the pool controller's replicas, then each running node's handler,
// one at a time, each ready before the next; as far as o says.
func restartComponents(ctx context.Context, c *state.Cluster, o rollOptions, out io.Writer) error {
	if o.poolController {
		if err := replacePoolController(ctx, c, out); err != nil {
			return err
		}
	}
	nodes := c.PoweredOn()
	if o.handlers >= 0 && o.handlers < len(nodes) {
		nodes = nodes[:o.handlers]
	}
	if len(nodes) == 0 {
		return nil
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
	for _, node := range nodes {
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
