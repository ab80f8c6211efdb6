package scale

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/nodestate"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/nodemeta"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var nodeCounts = flag.String("scale.nodes", "100", "comma-separated node counts, one run each, in this order")

var suite *envtest.Suite

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(envtest.Run(m, func(s *envtest.Suite) { suite = s }, "pool-controller"))
}

// plainState configures eth1 without an address from a pool: what
// kubernetes-nmstate does, the baseline.
const plainState = "interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  mtu: 1450\n"

// result is one run's figures.
type result struct {
	nodes                          int
	plain, pooled, scaleDown       time.Duration
	release                        time.Duration
	attemptsPerAlloc               float64
	requestsPerNode, eventsPerNode float64
	heapPerNode                    float64
	controlPlaneCPU                time.Duration
}

// BenchmarkScale is the project's scale benchmark. For each node count N
// it starts N handlers and the pool controller, rolls out a policy that
// configures eth1 (the baseline), then one that also gives each node an
// address from a pool, then deletes half the nodes at once, then the
// pooled policy (the other half release their addresses), and reports:
// both rollout times and their ratio, milliseconds per node, pool write
// attempts per allocation, API requests and watch events per handler,
// handler heap per node, the control plane's CPU, how long until every
// address of the removed nodes is back in the pool, and how long until the
// remaining nodes took their released addresses off and the pool freed
// them on that evidence. After the last
// count it prints each count's times against the first's.
//
//	go test -run '^$' -bench Scale -benchtime 1x ./test/scale/ -scale.nodes 100,300,1000
func BenchmarkScale(b *testing.B) {
	var results []result
	for _, f := range strings.Split(*nodeCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			b.Fatalf("-scale.nodes: %q is not a node count of at least 2", f)
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				results = append(results, run(b, n))
			}
		})
	}
	if len(results) > 1 {
		first := results[0]
		for _, r := range results[1:] {
			b.Logf("nodes %d vs %d (x%.1f): plain rollout x%.2f, pooled rollout x%.2f",
				r.nodes, first.nodes, float64(r.nodes)/float64(first.nodes),
				r.plain.Seconds()/first.plain.Seconds(), r.pooled.Seconds()/first.pooled.Seconds())
		}
	}
}

func run(b *testing.B, n int) result {
	ctx := context.Background()
	k := suite.Client
	role := fmt.Sprintf("scale%d-%d", n, time.Now().UnixNano()%100000)
	res := result{nodes: n}

	metricsAddr, stopController := startPoolController(b)
	defer stopController()

	metrics := handler.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	var c counters
	heapBefore := heap()
	stops := make([]func() error, n)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%04d", role, i)
		must(b, k.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"role": role}}}))
		stops[i] = startHandler(b, names[i], metrics, &c)
	}
	defer func() {
		for _, stop := range stops {
			if stop != nil {
				_ = stop()
			}
		}
	}()

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: role},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.200.0.0/16"}}}
	must(b, k.Create(ctx, pool))
	defer func() { _ = k.Delete(ctx, pool) }()
	waitFor(b, 2*time.Minute, "the pool to be available", func() bool {
		var p ippoolv1.NodeIPPool
		return k.Get(ctx, client.ObjectKeyFromObject(pool), &p) == nil && meta.IsStatusConditionTrue(p.Status.Conditions, ippoolv1.ConditionAvailable)
	})
	res.heapPerNode = float64(heap()-heapBefore) / float64(n)

	b.ResetTimer()
	cpu0, req0, ev0 := controlPlaneCPU(), c.requests.Load(), c.events.Load()
	cpu, kinds := cpuByProcess(), c.snapshot()
	res.plain = rollout(b, role+"-plain", role, nil, plainState, n)
	b.Logf("%d nodes, plain rollout %.1fs, CPU: %s; per node: %s", n, res.plain.Seconds(), cpuSince(cpu), c.perNodeSince(kinds, n))
	deletePolicy(b, role+"-plain")
	cpu, kinds = cpuByProcess(), c.snapshot()
	res.pooled = rollout(b, role+"-pool", role, map[string]string{"addr": "ippool." + role + ".allocate"}, envtest.OneAddressState, n)
	b.Logf("%d nodes, pooled rollout %.1fs, CPU: %s; per node: %s", n, res.pooled.Seconds(), cpuSince(cpu), c.perNodeSince(kinds, n))
	res.controlPlaneCPU = controlPlaneCPU() - cpu0
	res.requestsPerNode = float64(c.requests.Load()-req0) / float64(n)
	res.eventsPerNode = float64(c.events.Load()-ev0) / float64(n)
	res.attemptsPerAlloc = (counter(registry, "nmstate_ippool_allocation_attempts_total") +
		scrape(b, metricsAddr, "nmstate_ippool_controller_allocation_attempts_total")) / float64(n)

	cpu = cpuByProcess()
	res.scaleDown = scaleDown(b, role, names[n/2:], stops[n/2:], n-n/2)
	b.Logf("%d nodes, scale-down of %d %.1fs, CPU: %s", n, n-n/2, res.scaleDown.Seconds(), cpuSince(cpu))
	cpu = cpuByProcess()
	res.release = release(b, role, role+"-pool")
	b.Logf("%d nodes, release by %d %.1fs, CPU: %s", n, n/2, res.release.Seconds(), cpuSince(cpu))
	b.StopTimer()

	b.ReportMetric(res.plain.Seconds(), "plain-s")
	b.ReportMetric(res.pooled.Seconds(), "ippool-s")
	b.ReportMetric(res.pooled.Seconds()/res.plain.Seconds(), "ippool/plain")
	b.ReportMetric(float64(res.plain.Milliseconds())/float64(n), "plain-ms/node")
	b.ReportMetric(float64(res.pooled.Milliseconds())/float64(n), "ippool-ms/node")
	b.ReportMetric(res.attemptsPerAlloc, "poolwrites/alloc")
	b.ReportMetric(res.requestsPerNode, "requests/node")
	b.ReportMetric(res.eventsPerNode, "watch-events/node")
	b.ReportMetric(res.heapPerNode/1024, "heap-KiB/node")
	b.ReportMetric(res.controlPlaneCPU.Seconds(), "control-plane-cpu-s")
	b.ReportMetric(res.scaleDown.Seconds(), "scale-down-s")
	b.ReportMetric(res.release.Seconds(), "release-s")
	return res
}

// startPoolController runs the pool controller binary against the suite's
// control plane and returns the address of its metrics.
func startPoolController(b *testing.B) (string, func()) {
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	must(b, suite.Env.Kubeconfig(kubeconfig))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	addr := l.Addr().String()
	must(b, l.Close())
	// The scale-down stops a node's handler before it deletes its Node,
	// as an autoscaler removes the machine first: no departure hold, so
	// that the figure measures the controller, not the hold.
	cmd := exec.Command(suite.Command("pool-controller"), "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", addr, "--metrics-secure=false", "--health-probe-bind-address", "0", "--quarantine-period", "30s", "--departure-hold", "0",
		"--webhook-port", "0")
	if log := os.Getenv("TEST_LOG"); log != "" {
		f, err := os.Create(log + ".pool-controller")
		must(b, err)
		cmd.Stdout, cmd.Stderr = f, f
	}
	must(b, cmd.Start())
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
}

// scrape sums the samples of a counter the pool controller exports.
func scrape(b *testing.B, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	must(b, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	must(b, err)
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		must(b, err)
		sum += v
	}
	return sum
}

// startHandler runs one node's handler and state reporter in a manager of
// their own, with the handler binary's cache, counting its requests and
// watch events in c.
func startHandler(b *testing.B, node string, metrics *handler.Metrics, c *counters) func() error {
	env := *suite.Env
	env.Config = c.countRequests(suite.Env.Config)
	mgr, err := env.NewManager(handler.CacheOptions(node))
	must(b, err)
	network := &memNetwork{}
	r := handler.New(mgr, node, network, metrics)
	// The benchmark's Nodes have no Ready condition: the API server is
	// the one probe that costs a request.
	r.Probes.Probes = []probe.Probe{probe.APIServer(mgr.GetAPIReader())}
	r.NetworkLock = &sync.Mutex{}
	refreshes := nodestate.NewRefreshes()
	r.StateChanged = func() { refreshes.Refresh(node) }
	must(b, r.SetupWithManager(mgr, handler.SetupOptions{SkipNameValidation: true}))
	reporter := nodestate.New(mgr, node, network)
	reporter.NetworkLock, reporter.Settle = r.NetworkLock, r.Settle
	r.StatePublished = reporter.Published // as cmd/handler wires it
	must(b, reporter.SetupWithManager(mgr, refreshes, nodestate.SetupOptions{SkipNameValidation: true}))
	must(b, c.countEvents(context.Background(), mgr, &nmstatev1.NodeNetworkConfigurationPolicy{},
		&nncev1beta1.NodeNetworkConfigurationEnactment{}, &nncev1beta1.NodeNetworkState{}, nodemeta.Object("")))
	return envtest.RunManager(mgr)
}

// rollout creates a policy for the nodes labelled role and returns how long
// until all n enactments and the policy are Available.
func rollout(b *testing.B, name, role string, captures map[string]string, desired string, n int) time.Duration {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"role": role}
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	began := time.Now()
	must(b, suite.Client.Create(context.Background(), p))
	want := fmt.Sprintf("%d/%d nodes successfully configured", n, n)
	waitFor(b, 30*time.Minute, "policy "+name+" to be available on every node", func() bool {
		var got nmstatev1.NodeNetworkConfigurationPolicy
		if err := suite.Client.Get(context.Background(), types.NamespacedName{Name: name}, &got); err != nil {
			return false
		}
		c := got.Status.Conditions.Find(shared.NodeNetworkConfigurationPolicyConditionAvailable)
		return c != nil && c.Status == corev1.ConditionTrue && c.Message == want && available(b, name) == n
	})
	return time.Since(began)
}

// scaleDown stops the handlers of nodes and deletes the Nodes at once, and
// returns how long until the pool holds only the remaining nodes'
// addresses, with nothing quarantined or in flight.
func scaleDown(b *testing.B, pool string, nodes []string, stops []func() error, remaining int) time.Duration {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range stops {
		wg.Add(1)
		go func(stop func() error) { defer wg.Done(); _ = stop() }(stops[i])
		stops[i] = nil
	}
	wg.Wait()
	began := time.Now()
	for _, name := range nodes {
		must(b, suite.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	kept := 0
	waitFor(b, 10*time.Minute, "the removed nodes' addresses to return to the pool", func() bool {
		var p ippoolv1.NodeIPPool
		if err := suite.Client.Get(ctx, types.NamespacedName{Name: pool}, &p); err != nil {
			return false
		}
		kept = len(p.Status.KeptForReturn)
		return p.Status.Allocated == int64(remaining) && len(p.Status.Quarantined) == 0 && len(p.Status.InFlight) == 0
	})
	took := time.Since(began)
	// Free, and kept for the removed nodes' return until the quarantine
	// period has passed.
	b.Logf("scale-down: %d addresses free again in %s, %d of them kept for their node's return", len(nodes), took.Round(100*time.Millisecond), kept)
	return took
}

// release deletes the pooled policy while the remaining nodes run, and
// returns how long until the pool is empty: every node took its address
// off and published its state, and every quarantine was lifted on that
// evidence.
func release(b *testing.B, pool, policy string) time.Duration {
	ctx := context.Background()
	began := time.Now()
	must(b, suite.Client.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy}}))
	waitFor(b, 10*time.Minute, "the released addresses to be lifted", func() bool {
		var p ippoolv1.NodeIPPool
		if err := suite.Client.Get(ctx, types.NamespacedName{Name: pool}, &p); err != nil {
			return false
		}
		return p.Status.Allocated == 0 && len(p.Status.Quarantined) == 0 && len(p.Status.InFlight) == 0
	})
	return time.Since(began)
}

func deletePolicy(b *testing.B, name string) {
	ctx := context.Background()
	_ = suite.Client.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
	waitFor(b, 10*time.Minute, "the enactments of "+name+" to be gone", func() bool {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		return suite.Client.List(ctx, &list, client.MatchingLabels{shared.EnactmentPolicyLabel: name}) == nil && len(list.Items) == 0
	})
}

// available counts the policy's Available enactments.
func available(b *testing.B, policy string) int {
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	must(b, suite.Client.List(context.Background(), &list, client.MatchingLabels{shared.EnactmentPolicyLabel: policy}))
	count := 0
	for _, e := range list.Items {
		if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionAvailable); c != nil && c.Status == corev1.ConditionTrue {
			count++
		}
	}
	return count
}

func waitFor(b *testing.B, limit time.Duration, what string, done func() bool) {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// heap returns the bytes of live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// counter sums a counter of registry across its labels.
func counter(registry *prometheus.Registry, name string) float64 {
	families, err := registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += metricValue(m)
		}
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return 0
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
