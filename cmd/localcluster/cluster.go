package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// cluster is a local cluster's state, kept in <dir>/state.json: where its
// programs are, and every process it started.
type cluster struct {
	dir string
	// APIServer and Etcd are the URLs of the control plane.
	APIServer string `json:"apiServer"`
	Etcd      string `json:"etcd"`
	// Bin holds handler, pool-controller and nmstatectl-sim; Assets holds
	// etcd and kube-apiserver.
	Bin    string `json:"bin"`
	Assets string `json:"assets"`
	// GracePeriod is the pool controller's --gc-grace-period.
	GracePeriod string `json:"gcGracePeriod"`
	// QuarantinePeriod is the pool controller's --quarantine-period.
	QuarantinePeriod string `json:"quarantinePeriod"`
	// Controllers is how many pool controller replicas run.
	Controllers int `json:"controllers,omitempty"`
	// WebhookPort is where the first pool controller replica serves the
	// NodeIPPool webhook; the webhook configuration calls it there, so a
	// restarted replica listens on the same port.
	WebhookPort int `json:"webhookPort,omitempty"`
	// Real is set on a cluster of real nodes (up --kubelets): kubelets run
	// its nodes, and the handler and the pool controller are pods.
	Real *realCluster `json:"real,omitempty"`
	// Retries, if set, is how many times the handlers retry a failed
	// apply (ours: --retries; kubernetes-nmstate's: NNCP_MAX_RETRIES, one
	// more, as it counts the first attempt).
	Retries *int `json:"retries,omitempty"`
	// Handler is the handler of simulated nodes: "ours" (the default when
	// empty) or "upstream", kubernetes-nmstate's (up --handler upstream,
	// handler use).
	Handler string `json:"handler,omitempty"`
	// Companion is set when the pool controller runs in companion mode
	// beside kubernetes-nmstate's handler (up --handler upstream
	// --companion): it keeps pooled policies' NNCPs and leaves the NNCPs'
	// status to that handler.
	Companion bool `json:"companion,omitempty"`
	// GarbageCollector is set when Kubernetes' garbage collector runs
	// beside simulated nodes (up --garbage-collector).
	GarbageCollector bool `json:"garbageCollector,omitempty"`
	// NodeLifecycle is set when the simulated nodes post heartbeats (the
	// kubelets process) and Kubernetes' node lifecycle controller runs
	// beside them (up --node-lifecycle): a node whose machine stops (node
	// stop) turns NotReady once NodeGracePeriod has passed.
	NodeLifecycle   bool   `json:"nodeLifecycle,omitempty"`
	NodeGracePeriod string `json:"nodeGracePeriod,omitempty"`
	// PoweredOff lists the simulated nodes whose machine is stopped (node
	// stop): no handler, no heartbeat, the Node and the network kept.
	PoweredOff []string `json:"poweredOff,omitempty"`
	// ExtraCRDs are the CRD files up --crd installed.
	ExtraCRDs []string `json:"extraCRDs,omitempty"`
	// PeerHandler is the kubernetes-nmstate handler's binary (make
	// peer-handler).
	PeerHandler string `json:"peerHandler,omitempty"`
	// ClockOffsets holds, by node, how far the clock of a simulated node's
	// handler is moved (node add --clock-offset), for tests of clock skew.
	ClockOffsets map[string]string `json:"clockOffsets,omitempty"`
	// Processes by name: etcd, kube-apiserver, pool-controller and
	// handler/<node>, with simulated nodes kube-controller-manager and
	// kubelets (unless turned off); with real nodes kube-controller-manager,
	// kube-scheduler, and containerd/, kube-proxy/ and kubelet/<node>.
	Processes map[string]*process `json:"processes"`
}

const stateFile = "state.json"

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *cluster) kubeconfig() string { return c.path("kubeconfig") }

// load reads the state of the cluster in dir.
func load(dir string) (*cluster, error) {
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no local cluster in %s: run 'localcluster up' first", dir)
	}
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return c, nil
}

func (c *cluster) save() error {
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.path(stateFile + ".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path(stateFile))
}

// lock serializes the commands that change one cluster.
func lock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close() }, nil
}

// running returns the names of the processes that run, in start order.
func (c *cluster) running() []string {
	var out []string
	for _, name := range c.order() {
		if c.Processes[name].alive() {
			out = append(out, name)
		}
	}
	return out
}

// order lists the processes in the order they start: etcd, the API server,
// the pool controller or the Kubernetes controllers, then the node
// processes by name.
func (c *cluster) order() []string {
	rank := map[string]int{"etcd": 0, "kube-apiserver": 1, "pool-controller": 2, "kube-controller-manager": 2, kubeletsName: 2, "kube-scheduler": 3}
	rankOf := func(name string) (int, bool) {
		if strings.HasPrefix(name, "pool-controller-") {
			name = "pool-controller"
		}
		r, ok := rank[name]
		return r, ok
	}
	names := make([]string, 0, len(c.Processes))
	for name := range c.Processes {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, oka := rankOf(a)
		rb, okb := rankOf(b)
		switch {
		case oka && okb:
			return ra - rb
		case oka:
			return -1
		case okb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

// stopAll stops every process, handlers first, and reports what it
// stopped.
func (c *cluster) stopAll() ([]string, error) {
	var stopped []string
	var errs []error
	order := c.order()
	slices.Reverse(order)
	for _, name := range order {
		p := c.Processes[name]
		if !p.alive() {
			continue
		}
		if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		stopped = append(stopped, name)
	}
	return stopped, errors.Join(errs...)
}

// client returns a client of the cluster's API server.
func (c *cluster) client() (client.Client, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig())
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}
