// Package state is a local cluster's state, kept in <dir>/state.json:
// where its programs are, how it was brought up, its nodes, and every
// process it started; with what every room of localcluster shares of it
// (paths, process names, the order processes start and stop in).
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// Cluster is a local cluster's state, kept in <dir>/state.json: where its
// programs are, and every process it started.
type Cluster struct {
	// Dir is the directory of the cluster: state.json and its lock, the
	// kubeconfigs, pki/, the etcd data, nodes/ (the simulated networks),
	// real/ (the real nodes' files), logs/ and the programs' files.
	Dir string `json:"-"`
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
	Real *RealCluster `json:"real,omitempty"`
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
	// SelfAllocate is set when our handlers take new addresses from the
	// pools themselves (up --self-allocate: handler --self-allocate).
	SelfAllocate bool `json:"selfAllocate,omitempty"`
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
	// CRDDir, if set, is the directory of CRD files installed instead of
	// those localcluster carries: another version's deploy/crd (up
	// --crd-dir, upgrade --crd-dir).
	CRDDir string `json:"crdDir,omitempty"`
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
	Processes map[string]*process.Process `json:"processes"`
}

// StateFile is the name of the state's file in the cluster's directory.
const StateFile = "state.json"

// Path is the path of parts under the cluster's directory.
func (c *Cluster) Path(parts ...string) string {
	return filepath.Join(append([]string{c.Dir}, parts...)...)
}

// Kubeconfig is the admin's kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.Path("kubeconfig") }

// Load reads the state of the cluster in dir.
func Load(dir string) (*Cluster, error) {
	raw, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no local cluster in %s: run 'localcluster up' first", dir)
	}
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	return c, nil
}

// Save writes the state, atomically.
func (c *Cluster) Save() error {
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.Path(StateFile + ".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.Path(StateFile))
}

// Lock serializes the commands that change one cluster.
func Lock(dir string) (func(), error) {
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

// Running returns the names of the processes that run, in start order.
func (c *Cluster) Running() []string {
	var out []string
	for _, name := range c.Order() {
		if c.Processes[name].Alive() {
			out = append(out, name)
		}
	}
	return out
}

// Order lists the processes in the order they start: etcd, the API server,
// the pool controller or the Kubernetes controllers, then the node
// processes by name.
func (c *Cluster) Order() []string {
	rank := map[string]int{"etcd": 0, "kube-apiserver": 1, "pool-controller": 2, "kube-controller-manager": 2, KubeletsName: 2, "kube-scheduler": 3}
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

// StopAll stops every process, handlers first, and reports what it
// stopped.
func (c *Cluster) StopAll() ([]string, error) {
	var stopped []string
	var errs []error
	order := c.Order()
	slices.Reverse(order)
	for _, name := range order {
		p := c.Processes[name]
		if !p.Alive() {
			continue
		}
		if err := p.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		stopped = append(stopped, name)
	}
	return stopped, errors.Join(errs...)
}

// Client returns a client of the cluster's API server, throttled as
// client-go's default (5 requests a second, bursts of 10).
func (c *Cluster) Client() (client.Client, error) { return c.client(0) }

// UnthrottledClient returns a client of the cluster's API server that
// client-go does not pace: for a process that stands for many (every
// node's kubelet), whose requests a per-client limit would delay past
// their deadline.
func (c *Cluster) UnthrottledClient() (client.Client, error) { return c.client(-1) }

// client returns a client of the cluster's API server with qps (0:
// client-go's default; negative: unthrottled).
func (c *Cluster) client(qps float32) (client.Client, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS = qps
	return client.New(cfg, client.Options{Scheme: s})
}

// Step runs one step of up, printing its name, result and duration, so
// that a slow step shows progress instead of silence.
func Step(out io.Writer, name string, run func() error) error {
	fmt.Fprintf(out, "  %-22s ", name)
	start := time.Now()
	if err := run(); err != nil {
		fmt.Fprintln(out, "failed")
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(out, "ready (%.1fs)\n", time.Since(start).Seconds())
	return nil
}

// Launch starts a process and records it before anything else can fail.
func (c *Cluster) Launch(name string, p *process.Process) error {
	if err := p.Start(); err != nil {
		return err
	}
	c.Processes[name] = p
	return c.Save()
}
