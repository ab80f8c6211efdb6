package handler_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	cfg    *envtest.Env
	k      client.Client
	scheme *runtime.Scheme
	simBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// TEST_LOG=<file> writes the handlers' logs there; otherwise they are
	// discarded.
	if path := os.Getenv("TEST_LOG"); path == "" {
		ctrl.SetLogger(logr.Discard())
	} else {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = f.Close() }()
		ctrl.SetLogger(zap.New(zap.WriteTo(f)))
	}
	dir, err := os.MkdirTemp("", "handler-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	simBin = filepath.Join(dir, "nmstatectl-sim")
	if out, err := exec.Command("go", "build", "-o", simBin, "../../cmd/nmstatectl-sim").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the simulator: %v\n%s", err, out)
		return 1
	}
	cfg, err = envtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cfg.Stop() }()
	scheme = cfg.Scheme
	if k, err = client.New(cfg.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// node is a simulated node: a Node object, a state file for nmstatectl-sim,
// and a handler (a manager of its own) while started.
type node struct {
	name    string
	state   string
	network *countingState
	metrics *handler.Metrics
	stop    context.CancelFunc
	done    chan struct{}
}

// countingState wraps the nmstatectl runner and counts applies, so tests can
// tell that a restarted handler did not touch the network.
type countingState struct {
	nmstatectl.Runner
	shows, applies atomic.Int32
}

func (c *countingState) Show(ctx context.Context) ([]byte, error) {
	c.shows.Add(1)
	return c.Runner.Show(ctx)
}

func (c *countingState) Apply(ctx context.Context, desired []byte) error {
	c.applies.Add(1)
	return c.Runner.Apply(ctx, desired)
}

// newNodes creates Nodes prefix01..prefixNN with the given labels.
func newNodes(t *testing.T, prefix string, n int, labels map[string]string) []*node {
	t.Helper()
	dir := t.TempDir()
	nodes := make([]*node, n)
	for i := range nodes {
		name := fmt.Sprintf("%s%02d", prefix, i+1)
		Expect(k.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})).To(Succeed())
		state := filepath.Join(dir, name+".yaml")
		nodes[i] = &node{name: name, state: state, network: &countingState{
			Runner: nmstatectl.Runner{Path: simBin, Env: []string{"NMSTATECTL_SIM_STATE=" + state}, Timeout: 30 * time.Second},
		}}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.stopHandler()
			_ = k.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.name}})
		}
	})
	return nodes
}

// start runs a handler for the node until stopHandler.
func (nd *node) start(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptrTo(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	r := handler.New(mgr, nd.name, nd.network, nd.metrics)
	r.PendingRequeue = 300 * time.Millisecond
	r.FailedRequeue = 500 * time.Millisecond
	Expect(r.SetupWithManager(mgr, handler.SetupOptions{SkipNameValidation: true})).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	nd.stop, nd.done = cancel, make(chan struct{})
	go func() {
		defer close(nd.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("handler of %s: %v", nd.name, err)
		}
	}()
}

func (nd *node) stopHandler() {
	if nd.stop != nil {
		nd.stop()
		<-nd.done
		nd.stop = nil
	}
}

func ptrTo[T any](v T) *T { return &v }

// newPool creates a pool and, unless available is false, marks it
// Available=True the way the pool controller will after its first rebuild.
func newPool(t *testing.T, name string, r ippoolv1.IPRange, available bool) *ippoolv1.NodeIPPool {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}}
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(context.Background(), p) })
	if available {
		markAvailable(t, name)
	}
	return p
}

func markAvailable(t *testing.T, name string) {
	t.Helper()
	Eventually(func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue,
			Reason: ippoolv1.ReasonReconciledPool, Message: "The pool is up to date"})
		return k.Status().Update(context.Background(), &p)
	}).Should(Succeed())
}

const staticIPState = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.addr.ip }}"
      prefix-length: "{{ capture.addr.prefix-length }}"
`

func newPolicy(t *testing.T, name string, selector map[string]string, captures map[string]string, desired string) *nmstatev1.NodeNetworkConfigurationPolicy {
	t.Helper()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = selector
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	Expect(k.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { deletePolicy(t, name) })
	return p
}

func deletePolicy(t *testing.T, name string) {
	t.Helper()
	_ = k.Delete(context.Background(), &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func getEnactment(node, policy string) (*nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	err := k.Get(context.Background(), shared.EnactmentKey(node, policy), &e)
	return &e, err
}

// enactmentState returns the True condition of the enactment and its
// message, or an error while it does not exist.
func enactmentState(node, policy string) func() (string, error) {
	return func() (string, error) {
		e, err := getEnactment(node, policy)
		if err != nil {
			return "", err
		}
		for _, c := range e.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return string(c.Type) + ": " + c.Message, nil
			}
		}
		return "no condition", nil
	}
}

// held returns the addresses an enactment records from a pool.
func held(node, policy, pool string) []string {
	e, err := getEnactment(node, policy)
	if err != nil {
		return nil
	}
	return e.Status.IPPool[pool].Allocated
}

// poolAddresses returns the addresses set in a pool's bitmap, sorted.
func poolAddresses(name string) ([]string, error) {
	var p ippoolv1.NodeIPPool
	if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
		return nil, err
	}
	r := p.Spec.Range
	rng, err := ippool.NewRange(ippool.Spec{CIDR: r.CIDR, Start: r.Start, End: r.End, Exclude: r.Exclude})
	if err != nil {
		return nil, err
	}
	a := ippool.NewAllocator(rng)
	if err := a.Restore(p.Status.AllocatedOffsets); err != nil {
		return nil, err
	}
	var out []string
	for o := range a.Offsets() {
		ip, _ := rng.IP(o)
		out = append(out, ip.String())
	}
	if int64(a.Count()) != p.Status.Allocated || p.Status.Allocated+p.Status.Free != p.Status.Size {
		return nil, fmt.Errorf("pool %s counts allocated=%d free=%d size=%d disagree with its bitmap (%d)",
			name, p.Status.Allocated, p.Status.Free, p.Status.Size, a.Count())
	}
	return sortedIPs(out), nil
}

func sortedIPs(ips []string) []string {
	sort.Slice(ips, func(i, j int) bool {
		return netip.MustParseAddr(ips[i]).Less(netip.MustParseAddr(ips[j]))
	})
	return ips
}

// recordedAddresses collects every address any enactment records from a
// pool, sorted, and fails on a duplicate: the Unique invariant.
func recordedAddresses(pool string) ([]string, error) {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := k.List(context.Background(), &list); err != nil {
		return nil, err
	}
	seen := map[string]string{}
	var out []string
	for _, e := range list.Items {
		for _, ip := range e.Status.IPPool[pool].Allocated {
			if other, dup := seen[ip]; dup {
				return nil, fmt.Errorf("address %s of pool %s is held by %s and %s", ip, pool, other, e.Name)
			}
			seen[ip] = e.Name
			out = append(out, ip)
		}
	}
	return sortedIPs(out), nil
}

// configured returns the IPv4 address the node's simulated network has on
// an interface.
func configured(nd *node, iface string) string {
	raw, err := nd.network.Runner.Show(context.Background())
	if err != nil {
		return ""
	}
	var s struct {
		Interfaces []struct {
			Name string `json:"name"`
			IPv4 struct {
				Address []struct {
					IP           string `json:"ip"`
					PrefixLength int    `json:"prefix-length"`
				} `json:"address"`
			} `json:"ipv4"`
		} `json:"interfaces"`
	}
	if err := yaml.Unmarshal(raw, &s); err != nil {
		return ""
	}
	for _, i := range s.Interfaces {
		if i.Name == iface && len(i.IPv4.Address) > 0 {
			return fmt.Sprintf("%s/%d", i.IPv4.Address[0].IP, i.IPv4.Address[0].PrefixLength)
		}
	}
	return ""
}
