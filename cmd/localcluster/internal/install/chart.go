package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"
)

// release is the name of the Helm release install --helm makes.
const release = "nmstate-ippool"

// installChart installs the Helm chart as an admin without cert-manager
// does: the namespace, labelled for the privileged handler pods; the
// webhook's Secret, signed by the cluster's CA; helm upgrade --install
// with that CA as the webhook's caBundle (webhook.certificate=provided,
// in a values file kept in the cluster's directory for later upgrades);
// then it waits as install does.
func (c *cluster) installChart(ctx context.Context, o Options, out io.Writer) error {
	for _, p := range []string{o.Kubectl, o.Helm, o.HelmBin, o.Values} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found: run from the repository's root, after 'make kubectl' and 'make tools' (or set --kubectl, --helm, --helm-bin, --values)", p)
		}
	}
	k, err := c.Client()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, k, ns, func() error {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged" // the handler runs privileged, on the host's network
		return nil
	}); err != nil {
		return fmt.Errorf("namespace %s: %w", o.Namespace, err)
	}
	webhookValues := c.Path("helm-webhook-values.yaml")
	// A stand-in CA while rendering: the real one is issued for the DNS
	// names the rendering gives.
	if err := writeWebhookValues(webhookValues, []byte("rendering")); err != nil {
		return err
	}
	objs, err := renderChart(ctx, o, webhookValues)
	if err != nil {
		return err
	}
	in, err := chartInstallation(objs)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Helm, err)
	}
	ca, err := c.writeWebhookSecret(ctx, k, in.certificate)
	if err != nil {
		return err
	}
	if err := writeWebhookValues(webhookValues, ca); err != nil {
		return err
	}
	helm := c.command(ctx, "helm", o.HelmBin, out)
	if err := helm("upgrade", "--install", release, o.Helm, "--namespace", o.Namespace, "--values", o.Values, "--values", webhookValues); err != nil {
		return err
	}
	fmt.Fprintf(out, "issued the webhook's certificate for %s (Secret %s/%s, signed by the cluster's CA), its CA in %s\n",
		strings.Join(in.certificate.dnsNames, ", "), in.certificate.namespace, in.certificate.secret, webhookValues)
	return in.waitRunning(c.command(ctx, "kubectl", o.Kubectl, out), o.Timeout, out)
}

// writeWebhookValues writes the chart's values for a webhook certificate
// the admin provides, signed by ca.
func writeWebhookValues(path string, ca []byte) error {
	raw, err := yaml.Marshal(map[string]any{"webhook": map[string]any{
		"certificate": "provided", "caBundle": base64.StdEncoding.EncodeToString(ca),
	}})
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// renderChart renders the chart with helm template, as installChart
// installs it.
func renderChart(ctx context.Context, o Options, webhookValues string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, o.HelmBin, "template", release, o.Helm, "--namespace", o.Namespace, "--values", o.Values, "--values", webhookValues)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w: %s", o.Helm, err, strings.TrimSpace(stderr.String()))
	}
	return decodeObjects(raw, "helm template "+o.Helm)
}

// chartInstallation finds the handler DaemonSet (none in companion mode),
// the pool controller Deployment, the Secret its webhook certificate is
// mounted from and the webhook configurations in the chart's objects.
func chartInstallation(objs []*unstructured.Unstructured) (installation, error) {
	var in installation
	var services []string
	for _, o := range objs {
		id := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		switch o.GetKind() {
		case "DaemonSet":
			in.handler = id
		case "Deployment":
			in.controller = id
			volumes, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
			for _, v := range volumes {
				if secret, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); secret != "" {
					in.certificate.namespace, in.certificate.secret = id.Namespace, secret
				}
			}
		case "Service":
			services = append(services, id.Name+"."+id.Namespace+".svc")
		}
	}
	// No DaemonSet in companion mode: kubernetes-nmstate's handler is the
	// one on the nodes.
	if in.controller.Name == "" || in.certificate.secret == "" {
		return in, errors.New("the chart renders no pool controller Deployment or no webhook Secret")
	}
	for _, dns := range services {
		in.certificate.dnsNames = append(in.certificate.dnsNames, dns, dns+".cluster.local")
	}
	return in, nil
}
