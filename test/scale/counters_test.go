package scale

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// counters are what all handlers of a run did, summed.
type counters struct {
	requests, events atomic.Int64
}

// countRequests makes cfg count every request its clients send.
func (c *counters) countRequests(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			c.requests.Add(1)
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
	count := func(any) { c.events.Add(1) }
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
	entries, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(raw)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < 0 {
			continue
		}
		name := s[open+1 : close]
		fields := strings.Fields(s[close+2:])
		// fields[1] is the parent, fields[11] and [12] user and system time.
		if len(fields) < 13 || fields[1] != me ||
			(name != "kube-apiserver" && name != "etcd" && name != "pool-controller") {
			continue
		}
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		total += time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	}
	return total
}
