package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/controlplane"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/nodes"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// cmdEtcd runs "etcd snapshot NAME" and "etcd restore NAME".
func cmdEtcd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "snapshot" && args[0] != "restore") {
		return fmt.Errorf("%w: etcd needs snapshot or restore", cli.ErrUsage)
	}
	verb := args[0]
	return withCluster(args[1:], "etcd "+verb, stderr, nil, func(c *state.Cluster, names []string) error {
		if c.Real != nil {
			return fmt.Errorf("etcd %s runs on clusters of simulated nodes", verb)
		}
		if verb == "snapshot" {
			if err := state.Step(stdout, "snapshot "+names[0], func() error { return controlplane.SnapshotEtcd(ctx, c, names[0]) }); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "the snapshot is %s\n", c.Path("snapshots", names[0]+".db"))
			return nil
		}
		return restoreEtcd(ctx, c, names[0], stdout)
	})
}

// restoreEtcd restores etcd from a snapshot as Kubernetes' procedure
// does, while the nodes keep running: the API server stops, etcd is
// restored, both start again, the kubelets register the nodes the
// snapshot does not know, and the components restart.
func restoreEtcd(ctx context.Context, c *state.Cluster, name string, out io.Writer) error {
	if err := state.Step(out, "restore "+name, func() error { return controlplane.RestoreEtcd(ctx, c, name) }); err != nil {
		return err
	}
	k, err := c.Client()
	if err != nil {
		return err
	}
	registered, err := nodes.Reregister(ctx, c, k)
	if err != nil {
		return err
	}
	if len(registered) > 0 {
		fmt.Fprintf(out, "registered the nodes the snapshot does not know: %s\n", strings.Join(registered, ", "))
	}
	return restartComponents(ctx, c, out)
}

// cmdBackup runs "backup FILE": the cluster's pools and policies, status
// included, into FILE.
func cmdBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return withCluster(args, "backup", stderr, nil, func(c *state.Cluster, names []string) error {
		f, err := os.Create(names[0])
		if err != nil {
			return err
		}
		n, err := controlplane.Backup(ctx, c, f)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "backed up %d objects into %s\n", n, names[0])
		return nil
	})
}

// cmdRestore runs "restore FILE [--without-status]": the cluster's
// control plane is rebuilt from nothing while the nodes keep running, and
// the objects of a backup come back, with their status or without.
func cmdRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var withoutStatus bool
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&withoutStatus, "without-status", false, "restore the objects without their status, as Velero does by default")
	}
	return withCluster(args, "restore", stderr, flags, func(c *state.Cluster, names []string) error {
		if c.Real != nil || c.Handler == state.HandlerUpstream {
			return errors.New("restore runs on clusters of simulated nodes with nmstate-ippool's handler")
		}
		raw, err := os.ReadFile(names[0])
		if err != nil {
			return err
		}
		return restore(ctx, c, raw, !withoutStatus, stdout)
	})
}

// restore stops the components, empties etcd, lets the kubelets register
// their nodes, restores the backup's objects, and starts the components.
func restore(ctx context.Context, c *state.Cluster, backup []byte, withStatus bool, out io.Writer) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	h := handlers.For(c)
	running := c.PoweredOn()
	for _, node := range running {
		if err := h.Stop(ctx, k, node, false); err != nil {
			return err
		}
	}
	if err := h.Retire(ctx, k); err != nil {
		return err
	}
	if err := state.Step(out, "empty etcd", func() error { return controlplane.WipeEtcd(ctx, c) }); err != nil {
		return err
	}
	if k, err = c.Client(); err != nil {
		return err
	}
	if _, err := nodes.Reregister(ctx, c, k); err != nil {
		return err
	}
	var n int
	err = state.Step(out, "restore the objects", func() error {
		n, err = controlplane.Restore(ctx, c, bytes.NewReader(backup), withStatus)
		return err
	})
	if err != nil {
		return err
	}
	if err := state.Step(out, "pool-controller", func() error { return h.Prepare(ctx, k) }); err != nil {
		return err
	}
	for _, node := range running {
		if err := state.Step(out, state.HandlerName(node), func() error { return h.Start(ctx, k, node) }); err != nil {
			return err
		}
	}
	what := "with their status"
	if !withStatus {
		what = "without their status"
	}
	fmt.Fprintf(out, "restored %d objects %s; %d nodes registered again\n", n, what, len(running))
	return nil
}
