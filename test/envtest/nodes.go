package envtest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/nodestate"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// BuildCommands builds the named commands of cmd/ into dir.
func BuildCommands(dir string, names ...string) error {
	for _, name := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", name, err, out)
		}
	}
	return nil
}

// Node is a simulated node: a state file for nmstatectl-sim and, while
// started, a handler running in a manager of its own. Creating the Node
// object is the test's business.
type Node struct {
	Name string
	// State is the simulator's state file; State+".fail" injects failures.
	State string
	// Network runs the simulator and counts what the handler asks of it.
	Network *CountingState
	// Metrics, if set, counts the handler's pool writes.
	Metrics *handler.Metrics
	// SelfAllocate runs the handler with --self-allocate: it takes
	// addresses from pools itself instead of asking the pool controller.
	SelfAllocate bool
	// Config, if set, holds the credentials the handler acts with (a
	// token bound to a pod on the node, see BearerConfig); the control
	// plane's admin when nil.
	Config *rest.Config
	// Tune, if set, adjusts the handler before it starts.
	Tune func(*handler.Reconciler)
	// NoStateReporter, if set, runs the handler without the node's
	// NodeNetworkState reporter, which the handler binary runs beside it
	// sharing its network lock: the node then publishes no state, takes no
	// released address off, and gives no evidence of a release.
	NoStateReporter bool

	stop func() error
}

// CountingState wraps the nmstatectl runner and counts shows and applies,
// so tests can tell that a handler did not touch the network.
type CountingState struct {
	nmstatectl.Runner
	Shows, Applies atomic.Int32
	// stall, while set, blocks every Show until it is closed: a handler
	// stalled between taking an address and recording it.
	stall atomic.Pointer[chan struct{}]
}

// Stall makes the handler's next reads of the state block until the
// returned function is called.
func (c *CountingState) Stall() (resume func()) {
	ch := make(chan struct{})
	c.stall.Store(&ch)
	return func() {
		if c.stall.CompareAndSwap(&ch, nil) {
			close(ch)
		}
	}
}

// Show reads the state and counts it.
func (c *CountingState) Show(ctx context.Context) ([]byte, error) {
	if ch := c.stall.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.Shows.Add(1)
	return c.Runner.Show(ctx)
}

// Apply applies a state and counts it.
func (c *CountingState) Apply(ctx context.Context, desired []byte) error {
	c.Applies.Add(1)
	return c.Runner.Apply(ctx, desired)
}

// NewNode returns a simulated node whose state lives in dir, configured by
// the simulator binary sim.
func NewNode(name, dir, sim string) *Node {
	state := filepath.Join(dir, name+".yaml")
	return &Node{Name: name, State: state, Network: &CountingState{
		Runner: nmstatectl.Runner{Path: sim, Env: []string{"NMSTATECTL_SIM_STATE=" + state}, Timeout: 30 * time.Second},
	}}
}

// Start runs the node's handler against the control plane until Stop, in a
// manager whose cache is the handler binary's (handler.CacheOptions). It
// requeues Pending enactments every 300ms, retries failed applies after
// 100ms, 200ms, ... up to 1s, and probes the API server only, polling
// every 100ms for up to 3s (a test gives its nodes other probes through
// Tune: the Nodes tests create have no Ready condition, and the simulated
// gateway does not exist).
// Handlers apply only once the policy controller grants them a slot: run
// one (StartPolicyAndEnactmentControllers or StartPoolController).
func (n *Node) Start(e *Env) error {
	mgr, err := e.newManager(n.Config, handler.CacheOptions(n.Name))
	if err != nil {
		return err
	}
	r := handler.New(mgr, n.Name, n.Network, n.Metrics)
	r.PendingRequeue = 300 * time.Millisecond
	r.FailedRequeue = 500 * time.Millisecond
	r.Retry.Duration, r.Retry.Cap = 100*time.Millisecond, time.Second
	r.Probes = probe.Set{Probes: []probe.Probe{probe.APIServer(mgr.GetAPIReader())},
		Interval: 100 * time.Millisecond, Timeout: 3 * time.Second}
	r.SelfAllocate = n.SelfAllocate
	if n.Tune != nil {
		n.Tune(r)
	}
	if err := r.SetupWithManager(mgr, handler.SetupOptions{SkipNameValidation: true}); err != nil {
		return err
	}
	if !n.NoStateReporter {
		refreshes := nodestate.NewRefreshes()
		r.NetworkLock = &sync.Mutex{}
		r.StateChanged = func() { refreshes.Refresh(n.Name) }
		reporter := nodestate.New(mgr, n.Name, n.Network.Runner)
		reporter.Refresh, reporter.NetworkLock, reporter.Settle = 500*time.Millisecond, r.NetworkLock, r.Settle
		if r.StatePublished == nil { // as cmd/handler wires it, unless Tune did
			r.StatePublished = reporter.Published
		}
		if err := reporter.SetupWithManager(mgr, refreshes, nodestate.SetupOptions{SkipNameValidation: true}); err != nil {
			return err
		}
	}
	n.stop = RunManager(mgr)
	return nil
}

// Stop stops the node's handler, if it runs, and returns how it ended.
func (n *Node) Stop() error {
	if n.stop == nil {
		return nil
	}
	err := n.stop()
	n.stop = nil
	return err
}

// Configured returns the first static address "ip/prefix-length" the
// node's simulated network has on an interface (IPv4 first, then IPv6),
// or "".
func (n *Node) Configured(iface string) string {
	if all := n.ConfiguredAll(iface); len(all) > 0 {
		return all[0]
	}
	return ""
}

// ConfiguredAll returns every static address/prefix the node's simulated
// network has on an interface (IPv4 first, then IPv6), or nil.
func (n *Node) ConfiguredAll(iface string) []string {
	raw, err := n.Network.Runner.Show(context.Background())
	if err != nil {
		return nil
	}
	return InterfaceAddresses(raw, iface)
}

// InterfaceAddresses returns the static addresses (address/prefix, IPv4
// first) an nmstate state has on one interface, or nil when it has none or
// the state does not parse.
func InterfaceAddresses(state []byte, iface string) []string {
	ifaces, err := netstate.StaticAddresses(state)
	if err != nil {
		return nil
	}
	for _, i := range ifaces {
		if i.Name == iface {
			return i.Addresses
		}
	}
	return nil
}

// Distinct returns the distinct values of m, sorted: as many as there are
// keys when every node holds its own address.
func Distinct(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NewManager returns a manager of the control plane for one simulated
// component: no metrics or health endpoints, and controller names that may
// repeat in one process.
func (e *Env) NewManager(cacheOpts ...cache.Options) (ctrl.Manager, error) {
	return e.newManager(nil, cacheOpts...)
}

// newManager is NewManager acting with cfg's credentials, the admin's
// when nil.
func (e *Env) newManager(cfg *rest.Config, cacheOpts ...cache.Options) (ctrl.Manager, error) {
	return e.newManagerRecording(cfg, nil, cacheOpts...)
}

// newManagerRecording is newManager whose cache records its use into
// *use, when use is not nil.
func (e *Env) newManagerRecording(cfg *rest.Config, use **cacheUse, cacheOpts ...cache.Options) (ctrl.Manager, error) {
	if cfg == nil {
		cfg = e.Config
	}
	opts := ctrl.Options{Scheme: e.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptrTo(true)},
		// As the pool-controller binary: Cluster API's objects are read
		// unstructured, from the cache.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}}}
	for _, c := range cacheOpts {
		opts.Cache = c
	}
	if use != nil {
		opts.NewCache = newCacheUse(use)
	}
	return ctrl.NewManager(cfg, opts)
}

// RunManager starts mgr and returns a function that stops it and returns
// how it ended.
func RunManager(mgr ctrl.Manager) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

func ptrTo[T any](v T) *T { return &v }

// PoolAddresses returns the addresses set in a pool's bitmap, sorted, and
// fails if the pool's counts disagree with its bitmap.
func PoolAddresses(ctx context.Context, c client.Reader, name string) ([]string, error) {
	var p ippoolv1.NodeIPPool
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		return nil, err
	}
	alloc, err := poolstatus.Allocator(&p)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for o := range alloc.Offsets() {
		ip, _ := alloc.Range().IP(o)
		out = append(out, ip)
	}
	if int64(alloc.Count()) != p.Status.Allocated || p.Status.Allocated+p.Status.Free != p.Status.Size {
		return nil, fmt.Errorf("pool %s counts allocated=%d free=%d size=%d disagree with its bitmap (%d)",
			name, p.Status.Allocated, p.Status.Free, p.Status.Size, alloc.Count())
	}
	return poolstatus.AddrStrings(out), nil
}

// EntryAddresses returns the addresses of a pool's in-flight and
// quarantine entries, sorted: set in its bitmap, recorded by no one yet or
// any more.
func EntryAddresses(ctx context.Context, c client.Reader, name string) ([]string, error) {
	var p ippoolv1.NodeIPPool
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, e := range p.Status.InFlight {
		out = append(out, netip.MustParseAddr(e.IP))
	}
	for _, q := range p.Status.Quarantined {
		out = append(out, netip.MustParseAddr(q.IP))
	}
	return slices.Compact(poolstatus.AddrStrings(out)), nil
}

// KeptAddresses returns the addresses a pool keeps for deleted nodes'
// return (status.keptForReturn), sorted: free in its bitmap.
func KeptAddresses(ctx context.Context, c client.Reader, name string) ([]string, error) {
	var p ippoolv1.NodeIPPool
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(p.Status.KeptForReturn))
	for _, k := range p.Status.KeptForReturn {
		out = append(out, netip.MustParseAddr(k.IP))
	}
	return poolstatus.AddrStrings(out), nil
}

// IndexedAs returns what a pool's bitmap must hold: the addresses the
// enactments record (failing if one is held twice) and those of its
// entries.
func IndexedAs(ctx context.Context, c client.Reader, pool string) ([]string, error) {
	recorded, err := RecordedAddresses(ctx, c, pool)
	if err != nil {
		return nil, err
	}
	entries, err := EntryAddresses(ctx, c, pool)
	if err != nil {
		return nil, err
	}
	var all []netip.Addr
	for _, s := range append(recorded, entries...) {
		all = append(all, netip.MustParseAddr(s))
	}
	return slices.Compact(poolstatus.AddrStrings(all)), nil
}

// RecordedAddresses returns every address enactments record from a pool,
// sorted, and fails if one is held twice: the Unique invariant.
func RecordedAddresses(ctx context.Context, c client.Reader, pool string) ([]string, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for ip, owners := range poolstatus.OwnersOf(pool, nil, holder.OfEnactments(list.Items)) {
		if len(owners) > 1 {
			return nil, errors.New(poolstatus.CollisionMessage(pool, poolstatus.Owners{ip: owners}, []netip.Addr{ip}))
		}
		out = append(out, ip)
	}
	return poolstatus.AddrStrings(out), nil
}

// PeerHandler returns kubernetes-nmstate's handler, built unmodified from
// the source in ../shared/peers by hack/peer-handler.sh into the
// checkout's bin/ (once: it builds again only when the source changes),
// or "" when this checkout has no peers folder: the suites that run it
// beside ours skip then.
func PeerHandler() (string, error) {
	bin := filepath.Join(RepoRoot(), "bin")
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "peer-handler.sh"), bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build kubernetes-nmstate's handler: %w\n%s", err, out)
	}
	path := filepath.Join(bin, "kubernetes-nmstate-handler")
	if _, err := os.Stat(path); err != nil {
		return "", nil // no peers folder; the script said so
	}
	return path, nil
}

// SaveNetworks returns a function that puts the simulated networks of the
// nodes whose state files are in dir back as they are now, as often as it
// is called: policies leave bonds, bridges and static addresses behind,
// as they would on real nodes, and nmstate refuses some states on what
// others left (an address on a port of a bond another left). A node that
// was never applied to has no state file yet (the simulator starts it
// from its defaults), so files that appear meanwhile are removed, and so
// are checkpoints.
func SaveNetworks(dir string) (restore func() error, err error) {
	files := func() ([]string, error) {
		states, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		checkpoints, err := filepath.Glob(filepath.Join(dir, "*.yaml.checkpoint"))
		return append(states, checkpoints...), err
	}
	now, err := files()
	if err != nil {
		return nil, err
	}
	saved := map[string][]byte{}
	for _, f := range now {
		if saved[f], err = os.ReadFile(f); err != nil {
			return nil, err
		}
	}
	return func() error {
		later, err := files()
		if err != nil {
			return err
		}
		for _, f := range later {
			if _, ok := saved[f]; !ok {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
		for f, raw := range saved {
			if err := os.WriteFile(f, raw, 0o600); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
