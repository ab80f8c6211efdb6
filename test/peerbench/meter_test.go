package peerbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// What a meter reads from the cluster: the API server's request and watch
// counters, the CPU and memory of its processes, and the write floor.

// sample is what the cluster counted so far.
type sample struct {
	requests, watchEvents, writes float64
	handlerCPU, apiServerCPU      time.Duration
	poolControllerCPU             time.Duration
	handlerRSS, poolControllerRSS uint64
	handlerAnon                   uint64
	writesBy                      map[string]float64 // by "VERB resource[/subresource]"
	readsBy                       map[string]float64 // GET and LIST, by "VERB resource[/subresource]"
}

var (
	requestLine = regexp.MustCompile(`^apiserver_request_total\{.*verb="([A-Z]+)".*\} ([0-9.e+]+)$`)
	labelValue  = regexp.MustCompile(`(resource|subresource)="([^"]*)"`)
	watchLine   = regexp.MustCompile(`^apiserver_watch_events_total\{.*\} ([0-9.e+]+)$`)
)

// snapshot reads the API server's request and watch event counters and
// the CPU and memory of the cluster's processes.
func (m *meter) snapshot() sample {
	s := sample{writesBy: map[string]float64{}, readsBy: map[string]float64{}}
	hc, err := rest.HTTPClientFor(m.cfg)
	must(m.b, err)
	resp, err := hc.Get(m.cfg.Host + "/metrics")
	must(m.b, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		m.b.Fatalf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if g := requestLine.FindStringSubmatch(sc.Text()); g != nil {
			v, _ := strconv.ParseFloat(g[2], 64)
			s.requests += v
			if slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, g[1]) {
				s.writes += v
				s.writesBy[writeKind(g[1], sc.Text())] += v
			} else if g[1] == "GET" || g[1] == "LIST" {
				s.readsBy[writeKind(g[1], sc.Text())] += v
			}
		} else if g := watchLine.FindStringSubmatch(sc.Text()); g != nil {
			v, _ := strconv.ParseFloat(g[1], 64)
			s.watchEvents += v
		}
	}
	must(m.b, sc.Err())
	for name, pid := range m.pids() {
		_, _, cpu, ok := envtest.ProcStat(pid)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "handler/"):
			s.handlerCPU += cpu
			s.handlerRSS += envtest.ProcRSS(pid)
			s.handlerAnon += envtest.ProcRSSAnon(pid)
		case name == "kube-apiserver":
			s.apiServerCPU += cpu
		case strings.HasPrefix(name, "pool-controller"):
			s.poolControllerCPU += cpu
			s.poolControllerRSS += envtest.ProcRSS(pid)
		}
	}
	return s
}

// writeKind names a write of a request counter's line: its verb and its
// resource, with its subresource ("PATCH nodenetworkconfigurationenactments/status").
func writeKind(verb, line string) string {
	var resource, sub string
	for _, g := range labelValue.FindAllStringSubmatch(line, -1) {
		if g[1] == "resource" {
			resource = g[2]
		} else {
			sub = g[2]
		}
	}
	if sub != "" {
		resource += "/" + sub
	}
	return verb + " " + resource
}

// addDiff adds after - before, key by key, to sum (made when nil).
func addDiff(sum, after, before map[string]float64) map[string]float64 {
	if sum == nil {
		sum = map[string]float64{}
	}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			sum[k] += d
		}
	}
	return sum
}

// pids returns the PIDs of the cluster's processes by name.
func (m *meter) pids() map[string]string {
	raw, err := os.ReadFile(filepath.Join(m.dir, "state.json"))
	must(m.b, err)
	out := map[string]string{}
	for _, g := range regexp.MustCompile(`"([a-z0-9./-]+)": \{\s*"pid": (\d+)`).FindAllStringSubmatch(string(raw), -1) {
		out[g[1]] = g[2]
	}
	return out
}

// floor times writes small objects created at once by as many clients
// as the cluster has nodes: how fast this API server takes the writes a
// rollout needs, whoever issues them.
func (m *meter) floor(writes int) time.Duration {
	ctx := context.Background()
	ns := fmt.Sprintf("floor-%d", time.Now().UnixNano())
	must(m.b, m.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	defer func() { _ = m.k.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) }()
	next := make(chan int, writes)
	for i := range writes {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(m.nodes, max(writes, 1)) {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d", i), Namespace: ns},
					Data: map[string]string{"state": "interfaces: []"}}
				if err := m.k.Create(ctx, cm); err != nil {
					m.b.Errorf("floor write: %v", err)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
