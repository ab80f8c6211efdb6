package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nmstate-ippool/nmstate-ippool/internal/cli"
)

// The names deploy/default gives the install's namespace, the webhook's
// Service, the Secret cert-manager issues its certificate into, and the
// annotation that asks cert-manager to inject its CA.
const (
	installNamespace = "nmstate-ippool"
	webhookService   = "nmstate-ippool-webhook." + installNamespace + ".svc"
	webhookSecret    = "nmstate-ippool-webhook-cert"
	injectCAFrom     = "cert-manager.io/inject-ca-from"
)

// installOptions are the flags of "install".
type installOptions struct {
	overlay, kubectl, certManagerCRDs string
	timeout                           time.Duration
}

func cmdInstall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := installOptions{}
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&o.overlay, "overlay", filepath.Join("deploy", "local"), "the kustomize directory to apply")
		fs.StringVar(&o.kubectl, "kubectl", filepath.Join(exeDir(), "kubectl"), "the kubectl to apply it with")
		fs.StringVar(&o.certManagerCRDs, "cert-manager-crds", filepath.Join("deploy", "testdata", "cert-manager-crds.yaml"),
			"stand-ins for cert-manager's CRDs, so that the install's Issuer and Certificate are accepted")
		fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the handler and pool controller pods")
	}
	return withCluster(args, "install", stderr, flags, func(c *cluster, _ []string) error {
		if c.Real == nil {
			return fmt.Errorf("%w: install runs the handler and the pool controller as pods, on real nodes: start the cluster with 'localcluster up --kubelets K' (a simulated cluster runs them as processes already)", cli.ErrUsage)
		}
		return c.install(ctx, o, stdout)
	})
}

// install applies the overlay with kubectl apply -k, does what
// cert-manager would (the webhook's Secret and CA bundle), and waits until
// the handler runs on every node and the pool controller's replicas are
// available.
func (c *cluster) install(ctx context.Context, o installOptions, out io.Writer) error {
	for _, p := range []string{o.kubectl, o.overlay, o.certManagerCRDs} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: run from the repository's root, after 'make kubectl' (or set --kubectl, --overlay, --cert-manager-crds)", p)
		}
	}
	k, err := c.client()
	if err != nil {
		return err
	}
	kubectl := func(args ...string) error {
		fmt.Fprintf(out, "$ kubectl %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, o.kubectl, append([]string{"--kubeconfig", c.kubeconfig()}, args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	wait := fmt.Sprintf("--timeout=%s", o.timeout)
	for _, s := range []func() error{
		func() error { return kubectl("apply", "-f", o.certManagerCRDs) },
		func() error {
			return kubectl("wait", "--for=condition=Established", "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io", "--timeout=60s")
		},
		func() error { return kubectl("apply", "-k", o.overlay) },
		func() error { return c.issueWebhookCertificate(ctx, k, out) },
		func() error {
			return kubectl("-n", installNamespace, "rollout", "status", "daemonset/nmstate-ippool-handler", wait)
		},
		func() error {
			return kubectl("-n", installNamespace, "rollout", "status", "deployment/nmstate-ippool-pool-controller", wait)
		},
	} {
		if err := s(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "nmstate-ippool is installed: the handler runs on every node, the pool controller on the control-plane node")
	return nil
}

// issueWebhookCertificate does cert-manager's part of the install: it
// writes the Certificate's Secret, with the serving certificate localcluster
// signed with the cluster's CA, and injects the CA into every webhook
// configuration that asks for it.
func (c *cluster) issueWebhookCertificate(ctx context.Context, k client.Client, out io.Writer) error {
	keys := pki{dir: c.path("pki")}
	data := map[string][]byte{}
	for key, file := range map[string]string{"tls.crt": "webhook-service.crt", "tls.key": "webhook-service.key", "ca.crt": "ca.crt"} {
		raw, err := os.ReadFile(keys.path(file))
		if err != nil {
			return err
		}
		data[key] = raw
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret, Namespace: installNamespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, k, secret, func() error {
		secret.Type = corev1.SecretTypeTLS
		secret.Data = data
		return nil
	}); err != nil {
		return fmt.Errorf("write the webhook's Secret: %w", err)
	}
	var list admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := k.List(ctx, &list); err != nil {
		return err
	}
	injected := 0
	for i := range list.Items {
		w := &list.Items[i]
		if w.Annotations[injectCAFrom] == "" {
			continue
		}
		patch := client.MergeFrom(w.DeepCopy())
		for j := range w.Webhooks {
			w.Webhooks[j].ClientConfig.CABundle = data["ca.crt"]
		}
		if err := k.Patch(ctx, w, patch); err != nil {
			return fmt.Errorf("inject the CA into %s: %w", w.Name, err)
		}
		injected++
	}
	if injected == 0 {
		return errors.New("no ValidatingWebhookConfiguration asks for a CA (annotation " + injectCAFrom + "): was the overlay applied?")
	}
	fmt.Fprintf(out, "issued the webhook's certificate (Secret %s/%s, signed by the cluster's CA) and injected the CA, as cert-manager would\n",
		installNamespace, webhookSecret)
	return nil
}
