package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

func (c *cluster) startEtcd(ctx context.Context) error {
	clientURL, peerURL, err := etcdURLs()
	if err != nil {
		return err
	}
	return c.startEtcdOn(ctx, clientURL, peerURL)
}

// etcdURLs picks the client and peer URLs of an etcd to start.
func etcdURLs() (clientURL, peerURL string, err error) {
	clientPort, err := process.FreePort()
	if err != nil {
		return "", "", err
	}
	peerPort, err := process.FreePort()
	if err != nil {
		return "", "", err
	}
	return "http://" + process.HostPort(clientPort), "http://" + process.HostPort(peerPort), nil
}

func (c *cluster) startEtcdOn(ctx context.Context, clientURL, peerURL string) error {
	c.Etcd = clientURL
	p := &process.Process{Binary: filepath.Join(c.Assets, "etcd"), Log: c.Path("logs", "etcd.log"), Health: clientURL + "/health", Args: []string{
		"--name=local", "--data-dir=" + c.Path("etcd"),
		"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=local=" + peerURL, "--unsafe-no-fsync",
	}}
	if err := c.Launch("etcd", p); err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, process.HTTPReady(p.Health))
}

func (c *cluster) startAPIServer(ctx context.Context, keys pki.Keys) error {
	port, err := process.FreePort()
	if err != nil {
		return err
	}
	return c.startAPIServerOn(ctx, keys, port)
}

// restartAPIServer stops kube-apiserver (killed, with crash) and starts it
// again on the same port, so every client finds it where it was.
func (c *cluster) restartAPIServer(ctx context.Context, crash bool) error {
	port, err := c.apiServerPort()
	if err != nil {
		return err
	}
	sig := syscall.SIGTERM
	if crash {
		sig = syscall.SIGKILL
	}
	if p, ok := c.Processes["kube-apiserver"]; ok {
		if err := p.Stop(sig, 30*time.Second); err != nil {
			return err
		}
	}
	if err := process.AwaitPort(port, 30*time.Second); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	return c.startAPIServerOn(ctx, pki.Keys{Dir: c.Path("pki")}, port)
}

func (c *cluster) startAPIServerOn(ctx context.Context, keys pki.Keys, port int) error {
	c.APIServer = "https://" + process.HostPort(port)
	p := &process.Process{Binary: filepath.Join(c.Assets, "kube-apiserver"), Log: c.Path("logs", "kube-apiserver.log"),
		Health: c.APIServer + "/readyz", Args: []string{
			"--etcd-servers=" + c.Etcd,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir=" + keys.Dir,
			"--tls-cert-file=" + keys.Path("apiserver.crt"), "--tls-private-key-file=" + keys.Path("apiserver.key"),
			"--client-ca-file=" + keys.Path("ca.crt"),
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + keys.Path("sa.pub"), "--service-account-signing-key-file=" + keys.Path("sa.key"),
			"--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC", "--allow-privileged=true",
			// Stopped while its clients stay connected (a restart, a
			// restore), it drains their requests and closes their
			// connections within two seconds, where net/http's graceful
			// shutdown would wait up to the request timeout (a minute)
			// for connections that watches keep open.
			"--shutdown-send-retry-after=true",
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
		}), "--bind-address=0.0.0.0", "--advertise-address="+state.RealHostIP, "--enable-aggregator-routing=true",
			"--kubelet-client-certificate="+keys.Path("admin.crt"), "--kubelet-client-key="+keys.Path("admin.key"),
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction")
	}
	if err := c.Launch("kube-apiserver", p); err != nil {
		return err
	}
	if err := keys.WriteKubeconfig(c.Kubeconfig(), c.APIServer, "admin"); err != nil {
		return err
	}
	probe, err := adminProbe(keys, p.Health)
	if err != nil {
		return err
	}
	return p.Ready(ctx, 2*time.Minute, probe)
}

// adminProbe probes an endpoint of the API server as the admin user.
func adminProbe(keys pki.Keys, url string) (func(context.Context) error, error) {
	cert, err := tls.LoadX509KeyPair(keys.Path("admin.crt"), keys.Path("admin.key"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(keys.Path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return process.StatusOK(hc, url), nil
}

// apiServerPort is the port kube-apiserver listens on.
func (c *cluster) apiServerPort() (int, error) {
	u, err := url.Parse(c.APIServer)
	if err != nil {
		return 0, fmt.Errorf("the API server's address %q: %w", c.APIServer, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("the API server's address %q: %w", c.APIServer, err)
	}
	return port, nil
}

// withEtcdStopped stops kube-apiserver, then etcd, runs change on etcd's
// data directory with the peer URL etcd will start with, and starts etcd
// and kube-apiserver again, the API server on its port, whether or not
// change failed.
func (c *cluster) withEtcdStopped(ctx context.Context, change func(data, peerURL string) error) error {
	port, err := c.apiServerPort()
	if err != nil {
		return err
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if p, ok := c.Processes[name]; ok {
			if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
				return fmt.Errorf("stop %s: %w", name, err)
			}
		}
	}
	clientURL, peerURL, err := etcdURLs()
	if err != nil {
		return err
	}
	changeErr := change(c.Path("etcd"), peerURL)
	if err := c.startEtcdOn(ctx, clientURL, peerURL); err != nil {
		return errors.Join(changeErr, err)
	}
	if err := process.AwaitPort(port, 30*time.Second); err != nil {
		return errors.Join(changeErr, fmt.Errorf("start kube-apiserver: %w", err))
	}
	return errors.Join(changeErr, c.startAPIServerOn(ctx, pki.Keys{Dir: c.Path("pki")}, port))
}

// etcdTool runs etcdctl or etcdutl of the assets.
func (c *cluster) etcdTool(ctx context.Context, tool string, args ...string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(c.Assets, tool), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s (make envtest-assets builds it)", tool, strings.Join(args, " "), err, out)
	}
	return nil
}
