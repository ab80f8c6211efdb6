// Command localcluster runs a local cluster for trying and testing
// nmstate-ippool on a machine without Kubernetes or NetworkManager: a real
// etcd and kube-apiserver (the envtest assets), the CRDs, simulated Nodes,
// the pool controller, and one handler process per node, each configuring
// its own simulated network (nmstatectl-sim). Every process runs on its
// own after the command returns; "down" stops them by PID.
//
//	localcluster up --nodes N [--dir DIR] [--gc-grace-period D] [--quarantine-period D] [--controllers N] [--bin DIR] [--assets DIR]
//	                [--handler ours|upstream [--companion]] [--self-allocate] [--peer-handler PATH] [--retries N]
//	                [--garbage-collector=false] [--node-lifecycle=false] [--node-grace-period D] [--crd FILE]... [--crd-dir DIR]
//	localcluster up --kubelets K [--images DIR] [--dir DIR] [--bin DIR] [--assets DIR]
//	localcluster handler use ours|upstream
//	localcluster install [--overlay DIR] [--kubectl PATH] [--cert-manager-crds FILE] [--timeout D]
//	localcluster install --helm CHART [--values FILE] [--namespace NS] [--helm-bin PATH] [--kubectl PATH] [--timeout D]
//	localcluster node add NAME [--label k=v]... [--kubelet] [--clock-offset D]
//	localcluster node remove|restart NAME [--crash]
//	localcluster node stall|resume|stop|start NAME
//	localcluster upgrade --bin DIR [--crd-dir DIR] [--pool-controller=false] [--handlers N]
//	localcluster etcd snapshot|restore NAME
//	localcluster backup FILE | restore FILE [--with-status]
//	localcluster controller restart [--crash] | apiserver restart [--crash]
//	localcluster status | down
//
// Every command takes --dir DIR (default .local); localcluster help prints the details.
//
// The directory (.local) holds state.json, kubeconfig, pki/, the etcd data,
// nodes/<node>.yaml (each node's network) and logs/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/controlplane"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/handlers"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/nodes"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/poolcontroller"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/periods"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes a command line and returns the exit code: 0 on success, 1
// on failure, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, cli.ErrUsage):
		fmt.Fprintf(stderr, "error: %v\n\n%s", err, usage)
		return 2
	default:
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", cli.ErrUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "up":
		return cmdUp(ctx, rest, stdout, stderr)
	case "down":
		return withCluster(rest, "down", stderr, nil, func(c *state.Cluster, _ []string) error { return down(c, stdout) })
	case "status":
		return withCluster(rest, "status", stderr, nil, func(c *state.Cluster, _ []string) error { return status(c, stdout) })
	case "node":
		return cmdNode(ctx, rest, stdout, stderr)
	case "install":
		return cmdInstall(ctx, rest, stdout, stderr)
	case "handler":
		return cmdHandler(ctx, rest, stdout, stderr)
	case "upgrade":
		return cmdUpgrade(ctx, rest, stdout, stderr)
	case "etcd":
		return cmdEtcd(ctx, rest, stdout, stderr)
	case "backup":
		return cmdBackup(ctx, rest, stdout, stderr)
	case "restore":
		return cmdRestore(ctx, rest, stdout, stderr)
	case "controller", "apiserver":
		return cmdRestart(ctx, cmd, rest, stdout, stderr)
	case state.KubeletsName:
		return cmdKubelets(ctx, rest, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("%w: unknown command %q", cli.ErrUsage, cmd)
	}
}

func cmdUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := upOptions{}
	fs.StringVar(&o.dir, "dir", ".local", "directory of the cluster's state, data and logs")
	fs.IntVar(&o.nodes, "nodes", 3, "how many nodes to create")
	fs.DurationVar(&o.gracePeriod, "gc-grace-period", 30*time.Second,
		"the pool controller's garbage collection grace period: how long an address may stay allocated and unrecorded")
	fs.IntVar(&o.controllers, "controllers", 1, "how many pool controller replicas run, with leader election")
	fs.DurationVar(&o.quarantine, "quarantine-period", 30*time.Second,
		"the pool controller's --quarantine-period: after how long a quarantined address is reported overdue (ReleasesConfirmed=False); no timer frees it")
	fs.StringVar(&o.bin, "bin", exeDir(), "directory of handler, pool-controller and nmstatectl-sim")
	fs.StringVar(&o.assets, "assets", "", "directory of etcd, kube-apiserver and, with --kubelets, the node components (default $KUBEBUILDER_ASSETS, else BIN/k8s)")
	fs.IntVar(&o.kubelets, "kubelets", 0,
		"how many real nodes to run instead of simulated ones: kubelets with their own containerd and network namespace (needs root; see 'make real-nodes')")
	o.handlerFlags(fs)
	fs.BoolVar(&o.garbageCollector, "garbage-collector", true, "run Kubernetes' garbage collector beside simulated nodes (kube-controller-manager "+
		"--controllers=garbagecollector, from ASSETS): dependents are deleted with their owners, and --cascade=foreground|orphan "+
		"work as in a cluster (real nodes run the whole kube-controller-manager)")
	fs.BoolVar(&o.nodeLifecycle, "node-lifecycle", true, "post the simulated nodes' heartbeats and run Kubernetes' node lifecycle "+
		"controller: a node whose machine stops (node stop) turns NotReady as in a cluster")
	fs.DurationVar(&o.nodeGracePeriod, "node-grace-period", 40*time.Second,
		"how long a node may post no heartbeat before the node lifecycle controller turns it NotReady (its --node-monitor-grace-period)")
	fs.StringVar(&o.images, "images", "", "with --kubelets, directory of the image tarballs of make images-local (default BIN/images)")
	fs.StringVar(&o.crdDir, "crd-dir", "", "install the CRD files of this directory instead of this version's, "+
		"e.g. an earlier version's deploy/crd with its binaries in --bin, to upgrade from (simulated nodes)")
	fs.Func("crd", "a CRD file to install before the controllers start, e.g. Cluster API's IPAM CRDs (repeatable; simulated nodes)", func(path string) error {
		o.crds = append(o.crds, path)
		return nil
	})
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return err
	}
	if err := o.check(fs); err != nil {
		return err
	}
	if o.assets == "" {
		o.assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.assets == "" {
		o.assets = filepath.Join(o.bin, "k8s")
	}
	// Absolute, as every path the cluster records: later commands run
	// from other directories.
	var err error
	for _, p := range append([]*string{&o.dir, &o.bin, &o.assets, &o.crdDir, &o.peerHandler}, pointers(o.crds)...) {
		if *p == "" {
			continue
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	unlock, err := state.Lock(o.dir)
	if err != nil {
		return err
	}
	defer unlock()
	return up(ctx, o, stdout)
}

// handlerFlags defines the flags of up that choose and tune the handlers.
func (o *upOptions) handlerFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.retries, "retries", -1, "how many times the handlers retry a failed apply (default: their own, 5)")
	fs.StringVar(&o.handler, "handler", state.HandlerOurs, "the simulated nodes' handler: ours, or upstream (kubernetes-nmstate's, from make peer-handler)")
	fs.BoolVar(&o.selfAllocate, "self-allocate", false, "run our handlers with --self-allocate: each takes new addresses from the pools itself, "+
		"writing their status, instead of asking the pool controller, which runs with --hold-carried-addresses (as deploy/self-allocate sets it)")
	fs.BoolVar(&o.companion, "companion", false, "with --handler upstream, run the pool controller in companion mode beside it "+
		"(PooledNodeNetworkConfigurationPolicy: one plain NNCP per node, addresses written in)")
	fs.StringVar(&o.peerHandler, "peer-handler", "", "kubernetes-nmstate's handler binary (default BIN/kubernetes-nmstate-handler)")
}

// check checks the flags of up and sets the defaults they imply.
func (o *upOptions) check(fs *flag.FlagSet) error {
	if err := o.checkKubelets(fs); err != nil {
		return err
	}
	if !slices.Contains(state.HandlerKinds, o.handler) {
		return fmt.Errorf("%w: --handler %q: give one of %s", cli.ErrUsage, o.handler, strings.Join(state.HandlerKinds, ", "))
	}
	if o.companion && o.handler != state.HandlerUpstream {
		return fmt.Errorf("%w: --companion runs beside kubernetes-nmstate's handler: add --handler upstream", cli.ErrUsage)
	}
	if o.selfAllocate && (o.handler != state.HandlerOurs || o.kubelets > 0) {
		return fmt.Errorf("%w: --self-allocate is a flag of our handler on simulated nodes (real nodes: deploy/self-allocate)", cli.ErrUsage)
	}
	if o.handler == state.HandlerUpstream && o.kubelets > 0 {
		return fmt.Errorf("%w: --handler upstream runs on simulated nodes; real nodes run the handler of the install", cli.ErrUsage)
	}
	if o.peerHandler == "" {
		o.peerHandler = filepath.Join(o.bin, "kubernetes-nmstate-handler")
	}
	if o.gracePeriod < 3*time.Second {
		return fmt.Errorf("%w: --gc-grace-period %s: give at least 3s", cli.ErrUsage, o.gracePeriod)
	}
	if err := periods.Check(o.gracePeriod, o.quarantine, periods.DefaultDepartureHold); err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	if o.nodeGracePeriod < 5*time.Second {
		return fmt.Errorf("%w: --node-grace-period %s: give at least 5s", cli.ErrUsage, o.nodeGracePeriod)
	}
	if o.controllers < 1 || o.controllers > 3 {
		return fmt.Errorf("%w: --controllers %d: give 1 to 3", cli.ErrUsage, o.controllers)
	}
	if o.nodes < 0 || o.nodes > nodes.MaxSimulated {
		return fmt.Errorf("%w: --nodes %d: give 0 to %d", cli.ErrUsage, o.nodes, nodes.MaxSimulated)
	}
	return nil
}

// checkKubelets checks --kubelets and, for real nodes, sets the options
// they imply: no simulated nodes, and the images' directory.
func (o *upOptions) checkKubelets(fs *flag.FlagSet) error {
	if o.kubelets < 0 || o.kubelets > state.MaxRealNodes {
		return fmt.Errorf("%w: --kubelets %d: give 0 to %d", cli.ErrUsage, o.kubelets, state.MaxRealNodes)
	}
	if o.kubelets == 0 {
		return nil
	}
	nodesSet := false
	fs.Visit(func(f *flag.Flag) { nodesSet = nodesSet || f.Name == "nodes" })
	if nodesSet && o.nodes > 0 {
		return fmt.Errorf("%w: --nodes %d with --kubelets %d: a cluster's nodes are all simulated or all real; give one", cli.ErrUsage, o.nodes, o.kubelets)
	}
	o.nodes = 0
	if o.images == "" {
		o.images = filepath.Join(o.bin, "images")
	}
	var err error
	o.images, err = filepath.Abs(o.images)
	return err
}

// pointers returns a pointer to each of s's elements.
func pointers(s []string) []*string {
	out := make([]*string, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}

// labels collects repeated --label k=v flags.
type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labels) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: write key=value", v)
	}
	l[k] = val
	return nil
}

// nodeVerbs are the node commands.
var nodeVerbs = []string{"add", "remove", "restart", "stall", "resume", "stop", "start"}

func cmdNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: node needs %s", cli.ErrUsage, strings.Join(nodeVerbs, ", "))
	}
	verb, rest := args[0], args[1:]
	extra := labels{}
	var crash, kubelet bool
	var offset time.Duration
	flags := func(fs *flag.FlagSet) {
		switch verb {
		case "add":
			fs.Var(extra, "label", "a label of the node, key=value (repeatable)")
			fs.BoolVar(&kubelet, "kubelet", false, "a real node: a kubelet with its own containerd (clusters of up --kubelets)")
			fs.DurationVar(&offset, "clock-offset", 0, "move the clock of the node's handler by this much (tests of clock skew; simulated nodes)")
		case "remove", "restart":
			fs.BoolVar(&crash, "crash", false, "kill the handler (SIGKILL) instead of stopping it")
		}
	}
	if !slices.Contains(nodeVerbs, verb) {
		return fmt.Errorf("%w: unknown node command %q", cli.ErrUsage, verb)
	}
	return withCluster(rest, "node "+verb, stderr, flags, func(c *state.Cluster, names []string) error {
		if kubelet && c.Real == nil {
			return fmt.Errorf("%w: --kubelet: this cluster's nodes are simulated; start a cluster of real nodes with 'localcluster up --kubelets K'", cli.ErrUsage)
		}
		if verb == "add" && !kubelet && c.Real != nil {
			return fmt.Errorf("%w: this cluster's nodes are real: add node %s with --kubelet", cli.ErrUsage, names[0])
		}
		k, err := c.Client()
		if err != nil {
			return err
		}
		backend := nodes.For(c)
		switch verb {
		case "add":
			c.SetClockOffset(names[0], offset)
			return backend.Add(ctx, k, names[0], extra, stdout)
		case "remove":
			return backend.Remove(ctx, k, names[0], crash, stdout)
		case "restart":
			return backend.Restart(ctx, k, names[0], crash, stdout)
		case "stop", "start":
			return backend.Power(ctx, k, names[0], verb == "start", stdout)
		default:
			return backend.Signal(ctx, k, names[0], verb, stdout)
		}
	})
}

// cmdHandler runs "handler use ours|upstream": every simulated node
// switches to the other handler, as an admin who replaces one handler
// DaemonSet with the other would: the running handlers stop, the new
// handler's cluster-wide parts are prepared, and it starts on every node.
func cmdHandler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 2 || args[0] != "use" || !slices.Contains(state.HandlerKinds, args[1]) {
		return fmt.Errorf("%w: handler use needs one of %s", cli.ErrUsage, strings.Join(state.HandlerKinds, ", "))
	}
	kind := args[1]
	return withCluster(args[2:], "handler use", stderr, nil, func(c *state.Cluster, _ []string) error {
		if c.Real != nil {
			return errors.New("the handler of real nodes is a pod of the install: install the other one instead")
		}
		if c.Handler == kind || (c.Handler == "" && kind == state.HandlerOurs) {
			return fmt.Errorf("the nodes already run %s", state.HandlerTitle(kind))
		}
		k, err := c.Client()
		if err != nil {
			return err
		}
		old, live := handlers.For(c), c.LiveNodes()
		for _, node := range live {
			if err := old.Stop(ctx, k, node, false); err != nil {
				return err
			}
		}
		if err := old.Retire(ctx, k); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stopped %s on %d nodes\n", state.HandlerTitle(c.Handler), len(live))
		c.Handler, c.Companion = kind, false
		if err := handlers.For(c).Prepare(ctx, k); err != nil {
			return err
		}
		for _, node := range live {
			if err := handlers.For(c).Start(ctx, k, node); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "started %s on %d nodes\n", state.HandlerTitle(kind), len(live))
		return nil
	})
}

// cmdRestart runs "controller restart [--crash]" and "apiserver restart
// [--crash]".
func cmdRestart(ctx context.Context, what string, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "restart" {
		return fmt.Errorf("%w: %s needs restart", cli.ErrUsage, what)
	}
	var crash bool
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&crash, "crash", false, "kill it (SIGKILL) instead of stopping it")
	}
	return withCluster(args[1:], what+" restart", stderr, flags, func(c *state.Cluster, _ []string) error {
		if what == "controller" && c.Real != nil {
			return errors.New("the pool controller of a cluster with real nodes runs as pods: delete the leader's pod instead (kubectl -n nmstate-ippool get lease nmstate-ippool-pool-controller names it)")
		}
		process, err := "kube-apiserver", error(nil)
		if what == "apiserver" {
			err = controlplane.RestartAPIServer(ctx, c, crash)
		} else {
			process, err = poolcontroller.Restart(ctx, c, crash)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restarted %s (pid %d)\n", process, c.Processes[process].PID)
		return nil
	})
}

// withCluster parses --dir (and flags), loads and locks the cluster, runs
// do with the positional arguments, and saves the state.
func withCluster(args []string, name string, stderr io.Writer, flags func(*flag.FlagSet),
	do func(*state.Cluster, []string) error) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".local", "directory of the cluster")
	if flags != nil {
		flags(fs)
	}
	positional := 0
	if strings.HasPrefix(name, "node ") || strings.HasPrefix(name, "etcd ") || name == "backup" || name == "restore" {
		positional = 1
	}
	names, err := cli.Parse(fs, args, positional, positional)
	if err != nil {
		return err
	}
	// Absolute: the paths written into the nodes' configurations are
	// read by programs that resolve them against their own directories.
	if *dir, err = filepath.Abs(*dir); err != nil {
		return err
	}
	unlock, err := state.Lock(*dir)
	if err != nil {
		return err
	}
	defer unlock()
	c, err := state.Load(*dir)
	if err != nil {
		return err
	}
	if err := do(c, names); err != nil {
		_ = c.Save()
		return err
	}
	return c.Save()
}

// stopEverything stops the real nodes, if any, then every process, and
// returns the names of the nodes and processes it stopped.
func stopEverything(c *state.Cluster) (realNodes, processes []string, err error) {
	var realErr error
	if c.Real != nil {
		realNodes, realErr = nodes.DownReal(c)
	}
	processes, err = c.StopAll()
	return realNodes, processes, errors.Join(realErr, err)
}

// down stops every process and keeps every file. Real nodes are stopped
// first, with their containers, and their network namespaces and the
// bridge removed.
func down(c *state.Cluster, out io.Writer) error {
	realNodes, stopped, err := stopEverything(c)
	if c.Real != nil {
		fmt.Fprintf(out, "stopped %d real nodes (kubelet, kube-proxy, containers, containerd, network namespace): %s\n",
			len(realNodes), strings.Join(realNodes, ", "))
	}
	fmt.Fprintf(out, "stopped %d processes: %s\nstate and logs are kept in %s\n", len(stopped), strings.Join(stopped, ", "), c.Dir)
	return err
}

// exeDir is the directory of this program, where make build puts the
// others.
func exeDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}
