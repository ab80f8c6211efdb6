package install

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestInstalledByFollowsTheOverlay: install finds the workloads and the
// webhook's certificate wherever an overlay put them, issues the
// certificate for the Services the webhooks call, and warns, naming the
// fix, when the overlay moved them without the Certificate's DNS names or
// the inject-ca-from annotation (cert-manager would leave the webhook
// unreachable).
func TestInstalledByFollowsTheOverlay(t *testing.T) {
	objects := func(namespace, certNamespace, annotation string) []*unstructured.Unstructured {
		obj := func(apiVersion, kind, name, namespace string, fields map[string]any) *unstructured.Unstructured {
			u := &unstructured.Unstructured{Object: fields}
			u.SetAPIVersion(apiVersion)
			u.SetKind(kind)
			u.SetName(name)
			u.SetNamespace(namespace)
			return u
		}
		w := obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "acme-nmstate-ippool", "", map[string]any{
			"webhooks": []any{map[string]any{"clientConfig": map[string]any{"service": map[string]any{"name": "acme-nmstate-ippool-webhook", "namespace": namespace}}}}})
		w.SetAnnotations(map[string]string{injectCAFrom: annotation})
		return []*unstructured.Unstructured{
			obj("apps/v1", "DaemonSet", "acme-nmstate-ippool-handler", namespace, map[string]any{}),
			obj("apps/v1", "Deployment", "acme-nmstate-ippool-pool-controller", namespace, map[string]any{}),
			obj("cert-manager.io/v1", "Certificate", "acme-nmstate-ippool-webhook", namespace, map[string]any{"spec": map[string]any{
				"secretName": "acme-nmstate-ippool-webhook-cert",
				"dnsNames":   []any{"acme-nmstate-ippool-webhook." + certNamespace + ".svc"}}}),
			w,
		}
	}
	t.Run("an overlay that rewrites the certificate's names", func(t *testing.T) {
		in, err := installedBy(objects("infra-net", "infra-net", "infra-net/acme-nmstate-ippool-webhook"))
		if err != nil {
			t.Fatal(err)
		}
		if in.handler.String() != "infra-net/acme-nmstate-ippool-handler" || in.controller.String() != "infra-net/acme-nmstate-ippool-pool-controller" {
			t.Errorf("handler %s, controller %s", in.handler, in.controller)
		}
		c := in.certificate
		if c.namespace != "infra-net" || c.secret != "acme-nmstate-ippool-webhook-cert" || len(c.warnings) != 0 ||
			!slices.Equal(c.dnsNames, []string{"acme-nmstate-ippool-webhook.infra-net.svc"}) || !slices.Equal(c.webhooks, []string{"acme-nmstate-ippool"}) {
			t.Errorf("certificate %+v", c)
		}
	})
	t.Run("an overlay that sets only the namespace", func(t *testing.T) {
		in, err := installedBy(objects("infra-net", "nmstate-ippool", "nmstate-ippool/acme-nmstate-ippool-webhook"))
		if err != nil {
			t.Fatal(err)
		}
		c := in.certificate
		if !slices.Contains(c.dnsNames, "acme-nmstate-ippool-webhook.infra-net.svc") {
			t.Errorf("the local certificate is for %v, not the Service the webhook calls", c.dnsNames)
		}
		if len(c.warnings) != 2 || !strings.Contains(c.warnings[0], "cert-manager would inject no CA") ||
			!strings.Contains(c.warnings[1], "the webhook calls acme-nmstate-ippool-webhook.infra-net.svc, which Certificate infra-net/acme-nmstate-ippool-webhook does not name") ||
			!strings.Contains(c.warnings[1], "deploy/testdata/infra-net") {
			t.Errorf("warnings %q", c.warnings)
		}
	})
	t.Run("an overlay without the workloads", func(t *testing.T) {
		if _, err := installedBy(objects("x", "x", "x/y")[2:]); err == nil || !strings.Contains(err.Error(), "no handler DaemonSet") {
			t.Errorf("error %v", err)
		}
	})
}
