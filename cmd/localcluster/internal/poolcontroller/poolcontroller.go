package poolcontroller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
)

// controllerName names the pool controller replica i (1-based).
func controllerName(i int) string {
	if i == 1 {
		return "pool-controller"
	}
	return fmt.Sprintf("pool-controller-%d", i)
}

// restartPoolController stops the pool controller (killed, with crash) and
// starts it again: of several replicas, the one that leads. It returns the
// name of the replica it restarted.
func (c *cluster) restartPoolController(ctx context.Context, crash bool) (string, error) {
	sig := syscall.SIGTERM
	if crash {
		sig = syscall.SIGKILL
	}
	name := c.leader(ctx)
	if err := c.Processes[name].Stop(sig, 15*time.Second); err != nil {
		return name, err
	}
	return name, c.startPoolController(ctx)
}

// leader returns the replica that holds the leader election lease, as
// its metrics tell; the first replica if none says so.
func (c *cluster) leader(ctx context.Context) string {
	for i := 1; i <= max(c.Controllers, 1); i++ {
		p := c.Processes[controllerName(i)]
		if p == nil || p.Metrics == "" || !p.Alive() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Metrics, nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(body), `leader_election_master_status{name="nmstate-ippool-pool-controller"} 1`) {
			return controllerName(i)
		}
	}
	return controllerName(1)
}

// startPoolController starts every pool controller replica that does not
// run; with several, they elect a leader.
func (c *cluster) startPoolController(ctx context.Context) error {
	for i := 1; i <= max(c.Controllers, 1); i++ {
		name := controllerName(i)
		if c.Processes[name].Alive() {
			continue
		}
		if err := c.startControllerReplica(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) startControllerReplica(ctx context.Context, name string) error {
	health, err := process.FreePort()
	if err != nil {
		return err
	}
	metrics, err := process.FreePort()
	if err != nil {
		return err
	}
	webhook, err := c.webhookPort(name)
	if err != nil {
		return err
	}
	if err := process.AwaitPort(webhook, 30*time.Second); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process.Process{Binary: filepath.Join(c.Bin, "pool-controller"), Log: c.Path("logs", name+".log"),
		Health: "http://" + process.HostPort(health) + "/readyz", Metrics: "http://" + process.HostPort(metrics) + "/metrics", Args: []string{
			"--kubeconfig=" + c.Kubeconfig(), "--leader-election-namespace=default",
			"--health-probe-bind-address=" + process.HostPort(health), "--metrics-bind-address=" + process.HostPort(metrics),
			"--gc-grace-period=" + c.GracePeriod, "--quarantine-period=" + c.QuarantinePeriod,
			"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", webhook),
			"--webhook-cert-dir=" + pki.Keys{Dir: c.Path("pki")}.WebhookCertDir(),
		}}
	if knowsFlag(p.Binary, "metrics-secure") {
		// On 127.0.0.1, for this host's user. An earlier version (the
		// baseline of a benchmark, a downgrade) serves plain HTTP only.
		p.Args = append(p.Args, "--metrics-secure=false")
	}
	if c.Companion {
		p.Args = append(p.Args, "--mode=companion")
	}
	if c.SelfAllocate && knowsFlag(p.Binary, holdCarried) {
		// The handlers take new addresses without looking at what other
		// nodes carry. An earlier version (a downgrade) has no such flag.
		p.Args = append(p.Args, "--"+holdCarried)
	}
	if err := c.Launch(name, p); err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, process.HTTPReady(p.Health))
}

// webhookPort returns the port a replica serves the webhook on: the first
// replica's is chosen once and kept, since the webhook configuration names
// it; the others take any free port.
func (c *cluster) webhookPort(replica string) (int, error) {
	if replica != controllerName(1) {
		return process.FreePort()
	}
	if c.WebhookPort == 0 {
		port, err := process.FreePort()
		if err != nil {
			return 0, err
		}
		c.WebhookPort = port
	}
	return c.WebhookPort, nil
}

// installWebhook installs deploy/webhook's configuration, calling the first
// pool controller replica by URL with the cluster's CA instead of through
// the Service (the local cluster has no service network). The certificate
// is the cluster's own: no cert-manager.
func (c *cluster) installWebhook(ctx context.Context, keys pki.Keys) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	w, err := deploy.ValidatingWebhook()
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(keys.Path("ca.crt"))
	if err != nil {
		return err
	}
	w.Annotations = nil // no cert-manager here
	for i := range w.Webhooks {
		url := fmt.Sprintf("https://%s%s", process.HostPort(c.WebhookPort), ptr.Deref(w.Webhooks[i].ClientConfig.Service.Path, "/"))
		w.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
	}
	err = k.Create(ctx, w)
	if apierrors.IsAlreadyExists(err) { // the nodes switched back to our handler
		var old admissionregistrationv1.ValidatingWebhookConfiguration
		if err = k.Get(ctx, client.ObjectKeyFromObject(w), &old); err == nil {
			w.ResourceVersion = old.ResourceVersion
			err = k.Update(ctx, w)
		}
	}
	if err != nil {
		return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", w.Name, err)
	}
	return nil
}

// stopPoolController stops every pool controller replica and removes the
// webhook, which no one would answer.
func (c *cluster) stopPoolController(ctx context.Context, k client.Client) error {
	if err := c.stopReplicas(); err != nil {
		return err
	}
	w, err := deploy.ValidatingWebhook()
	if err != nil {
		return err
	}
	err = k.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.Name}})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the NodeIPPool webhook: %w", err)
	}
	return nil
}

// stopReplicas stops every pool controller replica that runs.
func (c *cluster) stopReplicas() error {
	for name, p := range c.Processes {
		if strings.HasPrefix(name, controllerName(1)) && p.Alive() {
			if err := p.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
				return err
			}
		}
	}
	return nil
}

// holdCarried is the flag of a pool controller that holds for their
// nodes the free addresses nodes carry that no holder records.
const holdCarried = "hold-carried-addresses"

// knowsFlag reports whether the program at binary has the flag name, from
// the usage it prints for -h.
func knowsFlag(binary, name string) bool {
	out, _ := exec.Command(binary, "-h").CombinedOutput() // -h exits 0 or 2; the usage is what counts
	return strings.Contains(string(out), "-"+name+" ") || strings.Contains(string(out), "-"+name+"\n")
}
