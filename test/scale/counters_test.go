package scale

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// counters are what all handlers of a run did, summed, in all and by
// kind ("GET nodeippools", "UPDATE nodenetworkconfigurationpolicies").
type counters struct {
	requests, events atomic.Int64

	mu     sync.Mutex
	byKind map[string]int64
}

func (c *counters) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKind == nil {
		c.byKind = map[string]int64{}
	}
	c.byKind[kind]++
}

// snapshot returns the counts by kind so far.
func (c *counters) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byKind)
}

// perNodeSince formats the counts by kind since before, per node, largest
// first.
func (c *counters) perNodeSince(before map[string]int64, nodes int) string {
	now := c.snapshot()
	kinds := slices.Collect(maps.Keys(now))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Compare(now[b]-before[b], now[a]-before[a]) })
	var parts []string
	for _, k := range kinds {
		if d := now[k] - before[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(d)/float64(nodes)))
		}
	}
	return strings.Join(parts, ", ")
}

// requestKind names a request by its verb and resource, with "/status"
// for the status subresource.
func requestKind(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/<resource>[/name[/sub]] or /apis/<group>/<version>/<resource>[...]
	rest := parts
	if len(parts) > 0 && parts[0] == "api" {
		rest = parts[min(2, len(parts)):]
	} else if len(parts) > 0 && parts[0] == "apis" {
		rest = parts[min(3, len(parts)):]
	}
	if len(rest) >= 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	kind := req.Method
	switch {
	case req.URL.Query().Get("watch") == "true":
		kind = "WATCH"
	case req.Method == http.MethodGet && len(rest) == 1:
		kind = "LIST"
	}
	if len(rest) > 0 {
		kind += " " + rest[0]
	}
	if len(rest) > 2 {
		kind += "/" + rest[2]
	}
	return kind
}

// countRequests makes cfg count every request its clients send.
func (c *counters) countRequests(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			c.requests.Add(1)
			c.add(requestKind(req))
			return rt.RoundTrip(req)
		})
	}
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// countEvents counts the watch events of every informer of mgr's cache
// that serves objs.
func (c *counters) countEvents(ctx context.Context, mgr ctrl.Manager, objs ...client.Object) error {
	count := func(o any) {
		c.events.Add(1)
		c.add(fmt.Sprintf("event %T", o))
	}
	for _, o := range objs {
		inf, err := mgr.GetCache().GetInformer(ctx, o)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    count,
			UpdateFunc: func(_, n any) { count(n) },
			DeleteFunc: count,
		}); err != nil {
			return err
		}
	}
	return nil
}

// controlPlaneCPU returns the CPU time used so far by this process's
// children named kube-apiserver, etcd and pool-controller: the control
// plane of the benchmark.
func controlPlaneCPU() time.Duration {
	var total time.Duration
	for name, t := range cpuByProcess() {
		if name != handlersProcess {
			total += t
		}
	}
	return total
}

// handlersProcess names this process (every handler of the run) in
// cpuByProcess.
const handlersProcess = "handlers"

// cpuByProcess returns the CPU time used so far by this process (as
// handlersProcess) and by each of its children named kube-apiserver, etcd
// and pool-controller.
func cpuByProcess() map[string]time.Duration {
	out := map[string]time.Duration{}
	me := strconv.Itoa(os.Getpid())
	if _, _, t, ok := envtest.ProcStat("self"); ok {
		out[handlersProcess] = t
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		name, parent, t, ok := envtest.ProcStat(e.Name())
		if !ok || parent != me || (name != "kube-apiserver" && name != "etcd" && name != "pool-controller") {
			continue
		}
		out[name] += t
	}
	return out
}

// cpuSince formats the CPU each process used since before.
func cpuSince(before map[string]time.Duration) string {
	now := cpuByProcess()
	var parts []string
	for _, name := range []string{handlersProcess, "kube-apiserver", "etcd", "pool-controller"} {
		parts = append(parts, fmt.Sprintf("%s %.1fs", name, (now[name]-before[name]).Seconds()))
	}
	return strings.Join(parts, ", ")
}
