package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
)

// injectCAFrom is the annotation that asks cert-manager to inject a
// Certificate's CA into a webhook configuration.
const injectCAFrom = "cert-manager.io/inject-ca-from"

// Options are the flags of "localcluster install".
type Options struct {
	// Overlay is the kustomize directory applied with Kubectl;
	// CertManagerCRDs stand in for cert-manager's CRDs.
	Overlay, Kubectl, CertManagerCRDs string
	// Timeout bounds the wait for the handler and pool controller pods.
	Timeout time.Duration
	// Helm, if set, installs the chart in this directory with the Helm at
	// HelmBin instead of the overlay, as release nmstate-ippool in
	// Namespace, with the values in Values.
	Helm, HelmBin, Values, Namespace string
}

// install applies the overlay with kubectl apply -k, does what
// cert-manager would (the webhook's Secret and CA bundle), and waits until
// the handler runs on every node and the pool controller's replicas are
// available.
func (c *cluster) install(ctx context.Context, o Options, out io.Writer) error {
	for _, p := range []string{o.Kubectl, o.Overlay, o.CertManagerCRDs} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: run from the repository's root, after 'make kubectl' (or set --kubectl, --overlay, --cert-manager-crds)", p)
		}
	}
	k, err := c.Client()
	if err != nil {
		return err
	}
	kubectl := c.command(ctx, "kubectl", o.Kubectl, out)
	objs, err := renderOverlay(ctx, o.Kubectl, o.Overlay)
	if err != nil {
		return err
	}
	in, err := installedBy(objs)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Overlay, err)
	}
	for _, s := range []func() error{
		func() error { return kubectl("apply", "-f", o.CertManagerCRDs) },
		func() error {
			return kubectl("wait", "--for=condition=Established", "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io", "--timeout=60s")
		},
		func() error { return kubectl("apply", "-k", o.Overlay) },
		func() error { return c.issueWebhookCertificate(ctx, k, in.certificate, out) },
	} {
		if err := s(); err != nil {
			return err
		}
	}
	return in.waitRunning(kubectl, o.Timeout, out)
}

// command returns a runner of a command-line tool on the cluster: it
// prints each command as it runs it, and passes the cluster's kubeconfig.
func (c *cluster) command(ctx context.Context, name, bin string, out io.Writer) func(...string) error {
	return func(args ...string) error {
		fmt.Fprintf(out, "$ %s %s\n", name, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return nil
	}
}

// waitRunning waits until the handler runs on every node and the pool
// controller's replicas are available.
func (in installation) waitRunning(kubectl func(...string) error, timeout time.Duration, out io.Writer) error {
	wait := fmt.Sprintf("--timeout=%s", timeout)
	if in.handler.Name != "" {
		if err := kubectl("-n", in.handler.Namespace, "rollout", "status", "daemonset/"+in.handler.Name, wait); err != nil {
			return err
		}
	}
	if err := kubectl("-n", in.controller.Namespace, "rollout", "status", "deployment/"+in.controller.Name, wait); err != nil {
		return err
	}
	if in.handler.Name == "" {
		fmt.Fprintf(out, "nmstate-ippool is installed in namespace %s in companion mode: the pool controller runs on the control-plane node, no handler of ours\n",
			in.controller.Namespace)
		return nil
	}
	fmt.Fprintf(out, "nmstate-ippool is installed in namespace %s: the handler runs on every node, the pool controller on the control-plane node\n",
		in.handler.Namespace)
	return nil
}

// installation is what an overlay creates that install acts on, read
// from the rendered overlay, so that an overlay's namespace and name
// prefix are followed.
type installation struct {
	// handler and controller are the DaemonSet and the Deployment.
	handler, controller types.NamespacedName
	// certificate is the cert-manager Certificate of the webhook.
	certificate webhookCertificate
}

// webhookCertificate is what install does in cert-manager's stead: a
// Certificate's Secret, for its DNS names, and its CA injected into the
// webhook configurations.
type webhookCertificate struct {
	namespace, secret string
	// dnsNames are the Certificate's, and those of the Services the
	// webhook configurations call.
	dnsNames []string
	// webhooks are the names of the overlay's webhook configurations.
	webhooks []string
	// warnings say what cert-manager would do otherwise: an overlay that
	// moved the install without rewriting the Certificate's DNS names or
	// the inject-ca-from annotation.
	warnings []string
}

// renderOverlay renders a kustomize directory with kubectl kustomize.
func renderOverlay(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	return decodeObjects(raw, "kubectl kustomize "+dir)
}

// decodeObjects decodes the objects of a YAML stream that what printed.
func decodeObjects(raw []byte, what string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// installedBy finds the handler DaemonSet, the pool controller Deployment,
// the webhook's Certificate and the webhook configurations among objs (by
// the names deploy/default gives them, after any prefix).
func installedBy(objs []*unstructured.Unstructured) (installation, error) {
	var in installation
	var certID string
	var webhooks []*unstructured.Unstructured
	for _, o := range objs {
		id := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		switch {
		case o.GetKind() == "DaemonSet" && strings.HasSuffix(o.GetName(), "nmstate-ippool-handler"):
			in.handler = id
		case o.GetKind() == "Deployment" && strings.HasSuffix(o.GetName(), "nmstate-ippool-pool-controller"):
			in.controller = id
		case o.GetKind() == "Certificate" && strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/"):
			secret, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
			names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			certID = id.String()
			in.certificate = webhookCertificate{namespace: id.Namespace, secret: secret, dnsNames: names}
		case o.GetKind() == "ValidatingWebhookConfiguration":
			webhooks = append(webhooks, o)
		}
	}
	switch {
	case in.handler.Name == "" || in.controller.Name == "":
		return in, errors.New("the overlay creates no handler DaemonSet or no pool controller Deployment (want names ending in nmstate-ippool-handler and nmstate-ippool-pool-controller)")
	case in.certificate.secret == "" || len(in.certificate.dnsNames) == 0:
		return in, errors.New("the overlay creates no cert-manager Certificate with a secretName and dnsNames for the webhook (deploy/certmanager)")
	}
	for _, w := range webhooks {
		in.certificate.follow(w, certID)
	}
	return in, nil
}

// follow adds a webhook configuration of the overlay to those the
// certificate serves: the DNS names of the Services it calls, and what
// cert-manager would do otherwise.
func (c *webhookCertificate) follow(w *unstructured.Unstructured, certID string) {
	c.webhooks = append(c.webhooks, w.GetName())
	const fix = "add the replacements of deploy/testdata/infra-net to the overlay (docs/install.md, \"Another namespace or a name prefix\")"
	if asked := w.GetAnnotations()[injectCAFrom]; asked != certID {
		c.warnings = append(c.warnings, fmt.Sprintf("ValidatingWebhookConfiguration %s asks cert-manager for the CA of Certificate %q, not %q: "+
			"cert-manager would inject no CA, and the API server could not call the webhook; %s", w.GetName(), asked, certID, fix))
	}
	entries, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
	for _, e := range entries {
		name, _, _ := unstructured.NestedString(e.(map[string]any), "clientConfig", "service", "name")
		namespace, _, _ := unstructured.NestedString(e.(map[string]any), "clientConfig", "service", "namespace")
		dns := name + "." + namespace + ".svc"
		if name == "" || slices.Contains(c.dnsNames, dns) {
			continue
		}
		c.warnings = append(c.warnings, fmt.Sprintf("the webhook calls %s, which Certificate %s does not name (%s): "+
			"cert-manager would issue a certificate the API server refuses; %s", dns, certID, strings.Join(c.dnsNames, ", "), fix))
		c.dnsNames = append(c.dnsNames, dns, dns+".cluster.local")
	}
}

// issueWebhookCertificate does cert-manager's part of the install: it
// writes the Certificate's Secret, with the serving certificate localcluster
// signed with the cluster's CA, and injects the CA into every webhook
// configuration that asks for it.
func (c *cluster) issueWebhookCertificate(ctx context.Context, k client.Client, cert webhookCertificate, out io.Writer) error {
	ca, err := c.writeWebhookSecret(ctx, k, cert)
	if err != nil {
		return err
	}
	for _, name := range cert.webhooks {
		var w admissionregistrationv1.ValidatingWebhookConfiguration
		if err := k.Get(ctx, client.ObjectKey{Name: name}, &w); err != nil {
			return fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", name, err)
		}
		patch := client.MergeFrom(w.DeepCopy())
		for j := range w.Webhooks {
			w.Webhooks[j].ClientConfig.CABundle = ca
		}
		if err := k.Patch(ctx, &w, patch); err != nil {
			return fmt.Errorf("inject the CA into %s: %w", w.Name, err)
		}
	}
	for _, warning := range cert.warnings {
		fmt.Fprintln(out, "warning:", warning)
	}
	fmt.Fprintf(out, "issued the webhook's certificate for %s (Secret %s/%s, signed by the cluster's CA) and injected the CA into %s, as cert-manager would\n",
		strings.Join(cert.dnsNames, ", "), cert.namespace, cert.secret, strings.Join(cert.webhooks, ", "))
	return nil
}

// writeWebhookSecret writes the Secret of the webhook's serving
// certificate, for the certificate's DNS names and signed with the
// cluster's CA, and returns that CA.
func (c *cluster) writeWebhookSecret(ctx context.Context, k client.Client, cert webhookCertificate) ([]byte, error) {
	keys := pki.Keys{Dir: c.Path("pki")}
	if err := keys.IssueWebhookService(cert.dnsNames); err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{"tls.crt": "webhook-service.crt", "tls.key": "webhook-service.key", "ca.crt": "ca.crt"} {
		raw, err := os.ReadFile(keys.Path(file))
		if err != nil {
			return nil, err
		}
		data[key] = raw
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cert.secret, Namespace: cert.namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, k, secret, func() error {
		secret.Type = corev1.SecretTypeTLS
		secret.Data = data
		return nil
	}); err != nil {
		return nil, fmt.Errorf("write the webhook's Secret: %w", err)
	}
	return data["ca.crt"], nil
}
