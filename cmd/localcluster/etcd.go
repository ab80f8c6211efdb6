package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/controlplane"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/nodes"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// snapshotName is what a snapshot may be called: a file name of the
// cluster's snapshots directory, never a path.
var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

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
		if !snapshotName.MatchString(names[0]) {
			return fmt.Errorf("%w: %q is not a snapshot name: letters, digits, '.', '_' and '-', beginning with a letter or digit",
				cli.ErrUsage, names[0])
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
// does, while the nodes keep running, with the handlers stopped first as
// docs/operations.md asks: the handlers stop, the API server stops, etcd
// is restored, both start again, the kubelets register the nodes the
// snapshot does not know, the pool controller restarts, and the handlers
// start again. A handler left running would find the Node of a node that
// joined after the snapshot gone until its kubelet registers it again,
// and take off, as for any deleted Node, the addresses nothing in the
// restored cluster records for it.
func restoreEtcd(ctx context.Context, c *state.Cluster, name string, out io.Writer) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	h := handlers.For(c)
	running, err := stopHandlers(ctx, c, h, k, out)
	if err != nil {
		return err
	}
	if err := state.Step(out, "restore "+name, func() error { return controlplane.RestoreEtcd(ctx, c, name) }); err != nil {
		return err
	}
	if k, err = c.Client(); err != nil {
		return err
	}
	registered, err := nodes.Reregister(ctx, c, k)
	if err != nil {
		return err
	}
	if len(registered) > 0 {
		fmt.Fprintf(out, "registered the nodes the snapshot does not know: %s\n", strings.Join(registered, ", "))
	}
	if err := replacePoolController(ctx, c, out); err != nil {
		return err
	}
	return startHandlers(ctx, h, k, running, out)
}

// stopHandlers stops the handlers of the nodes that run, for etcd to
// change under them, and returns those nodes.
func stopHandlers(ctx context.Context, c *state.Cluster, h handlers.Handler, k client.Client, out io.Writer) ([]string, error) {
	running := c.PoweredOn()
	for _, node := range running {
		if err := state.Step(out, "stop "+state.HandlerName(node), func() error { return h.Stop(ctx, k, node, false) }); err != nil {
			return nil, err
		}
	}
	return running, nil
}

// startHandlers starts the handlers of nodes again.
func startHandlers(ctx context.Context, h handlers.Handler, k client.Client, nodes []string, out io.Writer) error {
	for _, node := range nodes {
		if err := state.Step(out, state.HandlerName(node), func() error { return h.Start(ctx, k, node) }); err != nil {
			return err
		}
	}
	return nil
}

// cmdBackup runs "backup FILE": the cluster's pools, policies and claims,
// status included, into FILE. FILE is written whole or not at all: a backup cut
// short by an error leaves no file that a restore would take for one.
func cmdBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return withCluster(args, "backup", stderr, nil, func(c *state.Cluster, names []string) error {
		file := names[0]
		f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
		if err != nil {
			return err
		}
		n, err := controlplane.Backup(ctx, c, f)
		err = errors.Join(err, f.Chmod(0o644), f.Sync(), f.Close())
		if err == nil {
			err = os.Rename(f.Name(), file)
		}
		if err != nil {
			_ = os.Remove(f.Name())
			return fmt.Errorf("back up into %s: %w", file, err)
		}
		fmt.Fprintf(stdout, "backed up %d objects into %s\n", n, file)
		return nil
	})
}

// cmdRestore runs "restore FILE [--with-status]": the cluster's control
// plane is rebuilt from nothing while the nodes keep running, and the
// objects of a backup come back, without their status (Velero's default)
// or with it. The backup is read and checked before anything is stopped.
func cmdRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var withStatus bool
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&withStatus, "with-status", false, "restore the objects' status too, as Velero's restoreStatus does "+
			"(the enactments are not in a backup: see docs/operations.md)")
	}
	return withCluster(args, "restore", stderr, flags, func(c *state.Cluster, names []string) error {
		if c.Real != nil {
			return errors.New("restore runs on clusters of simulated nodes")
		}
		f, err := os.Open(names[0])
		if err != nil {
			return err
		}
		objects, err := controlplane.ReadBackup(f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("%s is not a backup this cluster can restore, and nothing was changed: %w", names[0], err)
		}
		crds, err := controlplane.ReadCRDs(c)
		if err != nil {
			return fmt.Errorf("the CRDs to install again cannot be read, and nothing was changed: %w", err)
		}
		if err := objects.ServedBy(crds); err != nil {
			return fmt.Errorf("%s cannot be restored into this cluster, and nothing was changed: %w", names[0], err)
		}
		return restore(ctx, c, objects, crds, withStatus, stdout)
	})
}

// restore stops the components, empties etcd, lets the kubelets register
// their nodes, restores the backup's objects, and starts the components.
func restore(ctx context.Context, c *state.Cluster, objects *controlplane.Objects, crds controlplane.CRDs, withStatus bool,
	out io.Writer) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	h := handlers.For(c)
	running, err := stopHandlers(ctx, c, h, k, out)
	if err != nil {
		return err
	}
	if err := h.Retire(ctx, k); err != nil {
		return err
	}
	if err := state.Step(out, "empty etcd", func() error { return controlplane.WipeEtcd(ctx, c, crds) }); err != nil {
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
		n, err = controlplane.Restore(ctx, c, objects, withStatus)
		return err
	})
	if err != nil {
		return err
	}
	if err := state.Step(out, handlerSetup(c), func() error { return h.Prepare(ctx, k) }); err != nil {
		return err
	}
	if err := startHandlers(ctx, h, k, running, out); err != nil {
		return err
	}
	what := "with their status"
	if !withStatus {
		what = "without their status"
	}
	fmt.Fprintf(out, "restored %d objects %s; %d nodes registered again\n", n, what, len(running))
	return nil
}
