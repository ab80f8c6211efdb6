package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/deploy"
)

// upOptions are the flags of "up".
type upOptions struct {
	dir, bin, assets string
	nodes            int
	kubelets         int
	images           string
	gracePeriod      time.Duration
	quarantine       time.Duration
	controllers      int
	handler          string
	peerHandler      string
	retries          int // -1: the handlers' default
	// crds are CRD files installed with ours before any controller starts
	// (Cluster API's IPAM CRDs, whose claims the pool controller serves
	// only when they are there at its start).
	crds []string
	// companion runs the pool controller in companion mode beside
	// kubernetes-nmstate's handler.
	companion bool
	// garbageCollector runs Kubernetes' garbage collector beside
	// simulated nodes.
	garbageCollector bool
	// nodeLifecycle posts the simulated nodes' heartbeats and runs
	// Kubernetes' node lifecycle controller, whose grace period is
	// nodeGracePeriod.
	nodeLifecycle   bool
	nodeGracePeriod time.Duration
}

// up starts a local cluster and leaves it running. If a step fails, it
// stops what it started.
func up(ctx context.Context, o upOptions, out io.Writer) error {
	if old, err := load(o.dir); err == nil && len(old.running()) > 0 {
		return fmt.Errorf("a local cluster is already up in %s (%v): run 'localcluster down' first", o.dir, old.running())
	}
	c := &cluster{dir: o.dir, Bin: o.bin, Assets: o.assets, GracePeriod: o.gracePeriod.String(),
		QuarantinePeriod: o.quarantine.String(), Controllers: o.controllers, Processes: map[string]*process{},
		Handler: o.handler, PeerHandler: o.peerHandler, ExtraCRDs: o.crds, Companion: o.companion, GarbageCollector: o.garbageCollector,
		NodeLifecycle: o.nodeLifecycle, NodeGracePeriod: o.nodeGracePeriod.String()}
	if o.retries >= 0 {
		c.Retries = &o.retries
	}
	if o.kubelets > 0 {
		c.Real = &realCluster{Images: o.images, Nodes: map[string]*realNode{}}
		if err := c.checkRealPrerequisites(); err != nil {
			return err
		}
	}
	if err := c.checkBinaries(); err != nil {
		return err
	}
	if err := c.clean(); err != nil {
		return err
	}
	n := o.nodes
	if c.Real != nil {
		n = o.kubelets
	}
	if err := c.bootstrap(ctx, n, out); err != nil {
		if _, _, stopErr := c.stopEverything(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return fmt.Errorf("%w\n(stopped what was started; logs are in %s)", err, c.path("logs"))
	}
	fmt.Fprintf(out, "\nThe local cluster is up. Try:\n  export KUBECONFIG=%s\n  kubectl get nodes\n  localcluster status --dir %s\n",
		c.kubeconfig(), c.dir)
	if c.Real != nil {
		fmt.Fprintf(out, "Its nodes run no handler yet: install nmstate-ippool with\n  localcluster install --dir %s\n", c.dir)
	}
	return nil
}

// checkBinaries fails early, saying how to build, when a program is
// missing.
func (c *cluster) checkBinaries() error {
	programs := []string{filepath.Join(c.Assets, "etcd"), filepath.Join(c.Assets, "kube-apiserver")}
	if c.Real == nil { // real nodes run them from their images
		programs = append(programs, filepath.Join(c.Bin, "handler"), filepath.Join(c.Bin, "pool-controller"), filepath.Join(c.Bin, "nmstatectl-sim"))
	}
	if (c.GarbageCollector || c.NodeLifecycle) && c.Real == nil {
		programs = append(programs, filepath.Join(c.Assets, "kube-controller-manager"))
	}
	if c.Handler == handlerUpstream {
		if _, err := os.Stat(c.PeerHandler); err != nil {
			return fmt.Errorf("%s not found: run 'make peer-handler' (it builds kubernetes-nmstate's handler from ../shared/peers)", c.PeerHandler)
		}
	}
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: run 'make build envtest-assets' (or set --bin and --assets)", p)
		}
	}
	return nil
}

// clean removes what an earlier cluster in the directory left, and only
// that: the directory may hold other things.
func (c *cluster) clean() error {
	// Real nodes of a cluster that was not taken down leave mounts there.
	if err := unmountUnder(c.path("real")); err != nil {
		return err
	}
	for _, name := range []string{"etcd", "pki", "nodes", "real", "logs", "kubeconfig", stateFile} {
		if err := os.RemoveAll(c.path(name)); err != nil {
			return err
		}
	}
	return os.MkdirAll(c.dir, 0o755)
}

// handlerSetup names the step that prepares the simulated nodes' handler.
func (c *cluster) handlerSetup() string {
	if c.Handler == handlerUpstream && c.Companion {
		return "companion controller"
	}
	if c.Handler == handlerUpstream {
		return "upstream handler"
	}
	return "pool-controller"
}

// bootstrap starts the control plane and n nodes. Simulated nodes come
// with the CRDs and one handler process per node, ours with the pool
// controller and its webhook, kubernetes-nmstate's alone.
// Real nodes come with the Kubernetes controllers and kubelets; the
// handler and the pool controller come with the install (localcluster
// install).
func (c *cluster) bootstrap(ctx context.Context, n int, out io.Writer) error {
	keys := pki{dir: c.path("pki")}
	if err := keys.generate(); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}
	type startStep struct {
		name string
		run  func(context.Context) error
	}
	etcd := startStep{"etcd", c.startEtcd}
	apiServer := startStep{"kube-apiserver", func(ctx context.Context) error { return c.startAPIServer(ctx, keys) }}
	steps := []startStep{etcd, apiServer,
		{"CRDs", c.installCRDs},
		{"kube-controllers", c.startSimulatedControllers},
		{c.handlerSetup(), func(ctx context.Context) error {
			k, err := c.client()
			if err != nil {
				return err
			}
			return c.handler().prepare(ctx, k)
		}},
	}
	addNode := func(k client.Client, i int) error {
		name := fmt.Sprintf("node%02d", i)
		return step(out, "node "+name, func() error { return c.addNode(ctx, k, name, nil) })
	}
	if c.Real != nil {
		steps = []startStep{{"host network", func(context.Context) error { return c.setupHost() }},
			{"image registry", c.startRegistry}, etcd, apiServer, {"kube-controllers", c.startKubeControllers}}
		addNode = func(k client.Client, i int) error {
			return c.addRealNode(ctx, k, fmt.Sprintf("real%02d", i), nil, out)
		}
	}
	for _, s := range steps {
		if err := step(out, s.name, func() error { return s.run(ctx) }); err != nil {
			return err
		}
	}
	k, err := c.client()
	if err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		if err := addNode(k, i); err != nil {
			return err
		}
	}
	return nil
}

// step runs one step of up, printing its name, result and duration, so
// that a slow step shows progress instead of silence.
func step(out io.Writer, name string, run func() error) error {
	fmt.Fprintf(out, "  %-22s ", name)
	start := time.Now()
	if err := run(); err != nil {
		fmt.Fprintln(out, "failed")
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(out, "ready (%.1fs)\n", time.Since(start).Seconds())
	return nil
}

func (c *cluster) startEtcd(ctx context.Context) error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	clientURL, peerURL := "http://"+hostPort(clientPort), "http://"+hostPort(peerPort)
	c.Etcd = clientURL
	p := &process{Binary: filepath.Join(c.Assets, "etcd"), Log: c.path("logs", "etcd.log"), Health: clientURL + "/health", Args: []string{
		"--name=local", "--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=local=" + peerURL, "--unsafe-no-fsync",
	}}
	if err := c.launch("etcd", p); err != nil {
		return err
	}
	return p.ready(ctx, time.Minute, httpReady(p.Health))
}

func (c *cluster) startAPIServer(ctx context.Context, keys pki) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	return c.startAPIServerOn(ctx, keys, port)
}

// restartAPIServer stops kube-apiserver (killed, with crash) and starts it
// again on the same port, so every client finds it where it was.
func (c *cluster) restartAPIServer(ctx context.Context, crash bool) error {
	u, err := url.Parse(c.APIServer)
	if err != nil {
		return fmt.Errorf("the API server's address %q: %w", c.APIServer, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("the API server's address %q: %w", c.APIServer, err)
	}
	sig := syscall.SIGTERM
	if crash {
		sig = syscall.SIGKILL
	}
	if p, ok := c.Processes["kube-apiserver"]; ok {
		if err := p.stop(sig, 30*time.Second); err != nil {
			return err
		}
	}
	if err := awaitPort(port, 30*time.Second); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return c.startAPIServerOn(ctx, pki{dir: c.path("pki")}, port)
}

func (c *cluster) startAPIServerOn(ctx context.Context, keys pki, port int) error {
	c.APIServer = "https://" + hostPort(port)
	p := &process{Binary: filepath.Join(c.Assets, "kube-apiserver"), Log: c.path("logs", "kube-apiserver.log"),
		Health: c.APIServer + "/readyz", Args: []string{
			"--etcd-servers=" + c.Etcd,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir=" + keys.dir,
			"--tls-cert-file=" + keys.path("apiserver.crt"), "--tls-private-key-file=" + keys.path("apiserver.key"),
			"--client-ca-file=" + keys.path("ca.crt"),
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + keys.path("sa.pub"), "--service-account-signing-key-file=" + keys.path("sa.key"),
			"--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC", "--allow-privileged=true",
		}}
	if c.Real == nil {
		// No service account controller runs to give pods their accounts.
		p.Args = append(p.Args, "--disable-admission-plugins=ServiceAccount")
	} else {
		// The nodes reach it on the bridge, and so does the kubernetes
		// Service; it calls webhooks at their pods' addresses (there is no
		// kube-proxy on the host) and kubelets with the admin's
		// certificate (for logs and exec). Kubelets are authorized as
		// nodes, as in a production cluster.
		p.Args = append(slices.DeleteFunc(p.Args, func(a string) bool {
			return strings.HasPrefix(a, "--bind-address=") || strings.HasPrefix(a, "--advertise-address=") ||
				strings.HasPrefix(a, "--authorization-mode=")
		}), "--bind-address=0.0.0.0", "--advertise-address="+realHostIP, "--enable-aggregator-routing=true",
			"--kubelet-client-certificate="+keys.path("admin.crt"), "--kubelet-client-key="+keys.path("admin.key"),
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction")
	}
	if err := c.launch("kube-apiserver", p); err != nil {
		return err
	}
	if err := keys.writeKubeconfig(c.kubeconfig(), c.APIServer, "admin"); err != nil {
		return err
	}
	probe, err := adminProbe(keys, p.Health)
	if err != nil {
		return err
	}
	return p.ready(ctx, 2*time.Minute, probe)
}

// adminProbe probes an endpoint of the API server as the admin user.
func adminProbe(keys pki, url string) (func(context.Context) error, error) {
	cert, err := tls.LoadX509KeyPair(keys.path("admin.crt"), keys.path("admin.key"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(keys.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return statusOK(hc, url), nil
}

// readCRD reads one CRD from a YAML file.
func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s is a %q, not a CustomResourceDefinition", path, crd.Kind)
	}
	return &crd, nil
}

// installCRDs creates the CRDs of deploy/crd, and those of up --crd, and
// waits until they serve.
func (c *cluster) installCRDs(ctx context.Context) error {
	k, err := c.client()
	if err != nil {
		return err
	}
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	for _, path := range c.ExtraCRDs {
		crd, err := readCRD(path)
		if err != nil {
			return err
		}
		crds = append(crds, crd)
	}
	for _, crd := range crds {
		if err := k.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		ok := waitFor(time.Minute, func() bool { return established(ctx, k, crd.Name) })
		if !ok {
			return fmt.Errorf("CRD %s is not established after a minute", crd.Name)
		}
	}
	return nil
}

func established(ctx context.Context, k client.Client, name string) bool {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := k.Get(ctx, types.NamespacedName{Name: name}, &crd); err != nil {
		return false
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// launch starts a process and records it before anything else can fail.
func (c *cluster) launch(name string, p *process) error {
	if err := p.start(); err != nil {
		return err
	}
	c.Processes[name] = p
	return c.save()
}
