package deploy_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// chart is the Helm chart's directory.
var chart = filepath.Join(envtest.RepoRoot(), "deploy", "helm", "nmstate-ippool")

// helm returns the Helm binary, building the pinned one (with the
// Makefile's version flags) if `make tools` has not.
func helm(t *testing.T) string { return tool(t, "helm") }

// tool returns a tool of bin/, which `make tools` builds, building it
// with make if it has not.
func tool(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(envtest.RepoRoot(), "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("make", "--no-print-directory", bin)
	cmd.Dir = envtest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// runHelm runs helm with a private home (no repositories, no cache of the
// user's) and returns its standard output, or its error with its standard
// error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// template renders the chart as release nmstate-ippool in namespace ns
// with the given --set values.
func template(t *testing.T, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	return templateWith(t, ns, sets(set...)...)
}

// templateWith renders the chart with the given arguments of helm
// template.
func templateWith(t *testing.T, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "nmstate-ippool", chart, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, []byte(out))
}

// sets turns key=value pairs into --set arguments.
func sets(set ...string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

func decodeAll(t *testing.T, raw []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// TestHelmLint runs helm lint, strictly, on the chart with each way of
// getting the webhook's certificate and in both modes.
func TestHelmLint(t *testing.T) {
	for _, set := range [][]string{
		nil,
		{"mode=companion"},
		{"webhook.certificate=service-ca", "alerts.prometheusRule=true", "metrics.serviceMonitor=true"},
		{"webhook.certificate=provided", "webhook.caBundle=" + base64.StdEncoding.EncodeToString([]byte("a CA"))},
	} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestHelmRendersTheKustomizeInstall renders the chart's defaults and
// companion mode and compares them, object by object, with deploy/default
// and deploy/companion: the chart and the kustomize install are one
// install, and neither can drift from the other. The differences allowed
// are the chart's: no Namespace (Helm installs into the release's), and
// CRDs kept when the release is uninstalled.
func TestHelmRendersTheKustomizeInstall(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		dirs []string
	}{
		{"handler mode", nil, []string{"default"}},
		{"companion mode", sets("mode=companion"), []string{"companion"}},
		{"alerts", sets("alerts.prometheusRule=true", "metrics.serviceMonitor=true"), []string{"default", "alerts"}},
		{"the local cluster's real nodes", []string{"--values", filepath.Join(envtest.RepoRoot(), "deploy", "local", "helm-values.yaml")}, []string{"local"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := map[string]*unstructured.Unstructured{}
			for _, dir := range tt.dirs {
				for _, o := range render(t, dir) {
					if o.GetKind() != "Namespace" {
						want[objectKey(o)] = o
					}
				}
			}
			got := map[string]*unstructured.Unstructured{}
			for _, o := range templateWith(t, "nmstate-ippool", tt.args...) {
				if o.GetKind() == "CustomResourceDefinition" {
					if o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
						t.Errorf("%s: not kept on uninstall: deleting a CRD deletes every object of it", objectKey(o))
					}
					unstructured.RemoveNestedField(o.Object, "metadata", "annotations", "helm.sh/resource-policy")
					if len(o.GetAnnotations()) == 0 {
						unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
					}
				}
				if _, dup := got[objectKey(o)]; dup {
					t.Errorf("%s rendered twice", objectKey(o))
				}
				got[objectKey(o)] = o
			}
			for k, w := range want {
				g, ok := got[k]
				if !ok {
					t.Errorf("the chart does not render %s", k)
					continue
				}
				if !equality.Semantic.DeepEqual(g.Object, w.Object) {
					t.Errorf("%s differs:\n%s", k, diffYAML(t, w.Object, g.Object))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("the chart renders %s, which deploy/%v does not", k, tt.dirs)
				}
			}
		})
	}
}

// diffYAML shows the lines of want and got that differ, as YAML.
func diffYAML(t *testing.T, want, got map[string]any) string {
	t.Helper()
	w, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	wl, gl := strings.Split(string(w), "\n"), strings.Split(string(g), "\n")
	var b strings.Builder
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			fmt.Fprintf(&b, "- kustomize: %s\n", l)
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			fmt.Fprintf(&b, "+ helm:      %s\n", l)
		}
	}
	return b.String()
}

// TestHelmValues renders the chart with the values an admin sets and
// checks that each reaches the objects it is for: another namespace (the
// admission policies and the webhook follow), each way of getting the
// webhook's certificate, images and scheduling, and the handler's extra
// arguments, environment and volumes.
func TestHelmValues(t *testing.T) {
	t.Run("another namespace", func(t *testing.T) {
		objs := template(t, "infra-net")
		for _, problem := range identityProblems(t, objs) {
			t.Error(problem)
		}
		for _, o := range objs {
			if o.GetNamespace() != "" && o.GetNamespace() != "infra-net" {
				t.Errorf("%s is not in the release's namespace", objectKey(o))
			}
		}
		cert := find(t, objs, "Certificate", "nmstate-ippool-webhook")
		names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if !slices.Contains(names, "nmstate-ippool-webhook.infra-net.svc") {
			t.Errorf("the webhook's certificate names %v, not the Service in infra-net", names)
		}
		vwc := find(t, objs, "ValidatingWebhookConfiguration", "nmstate-ippool")
		if got := vwc.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "infra-net/nmstate-ippool-webhook" {
			t.Errorf("cert-manager injects the CA of %q", got)
		}
	})

	t.Run("OpenShift's service CA", func(t *testing.T) {
		objs := template(t, "nmstate-ippool", "mode=companion", "webhook.certificate=service-ca")
		if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "Certificate" || o.GetKind() == "Issuer"
		}) {
			t.Error("cert-manager's objects are rendered with the service CA")
		}
		svc := find(t, objs, "Service", "nmstate-ippool-webhook")
		if got := svc.GetAnnotations()["service.beta.openshift.io/serving-cert-secret-name"]; got != "nmstate-ippool-webhook-cert" {
			t.Errorf("the webhook's Service asks the service CA for %q, not the Secret the pool controller mounts", got)
		}
		vwc := find(t, objs, "ValidatingWebhookConfiguration", "nmstate-ippool")
		if a := vwc.GetAnnotations(); a["service.beta.openshift.io/inject-cabundle"] != "true" || a["cert-manager.io/inject-ca-from"] != "" {
			t.Errorf("the webhook configuration's annotations: %v", a)
		}
	})

	t.Run("a certificate the admin provides", func(t *testing.T) {
		ca := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\n"))
		objs := template(t, "nmstate-ippool", "webhook.certificate=provided", "webhook.caBundle="+ca)
		vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "nmstate-ippool")
		for i, w := range vwc.Webhooks {
			if string(w.ClientConfig.CABundle) != "-----BEGIN CERTIFICATE-----\n" {
				t.Errorf("webhook %d: caBundle %q", i, w.ClientConfig.CABundle)
			}
		}
		if len(find(t, objs, "ValidatingWebhookConfiguration", "nmstate-ippool").GetAnnotations()) != 0 {
			t.Error("a provided certificate's webhook configuration asks for an injection")
		}
	})

	t.Run("images, scheduling and the handler's extras", func(t *testing.T) {
		objs := template(t, "nmstate-ippool",
			"image.registry=registry.example.com/ippool", "image.tag=v0.1.0", "image.pullPolicy=IfNotPresent",
			"image.pullSecrets[0]=regcred",
			"handler.nodeSelector.node-role\\.kubernetes\\.io/worker=", "handler.priorityClassName=",
			"handler.extraArgs[0]=--failed-requeue=1m",
			"handler.extraEnv[0].name=NMSTATECTL_SIM_STATE", "handler.extraEnv[0].value=/var/lib/x.yaml",
			"handler.extraVolumes[0].name=state", "handler.extraVolumes[0].hostPath.path=/var/lib/x",
			"handler.extraVolumeMounts[0].name=state", "handler.extraVolumeMounts[0].mountPath=/var/lib/x",
			"poolController.replicas=3", "poolController.gcGracePeriod=10m", "poolController.extraArgs[0]=--quarantine-period=1h")
		ds := typed[appsv1.DaemonSet](t, objs, "DaemonSet", "nmstate-ippool-handler")
		pod := ds.Spec.Template.Spec
		c := pod.Containers[0]
		if c.Image != "registry.example.com/ippool/handler:v0.1.0" || c.ImagePullPolicy != "IfNotPresent" ||
			len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("handler image %q, pull policy %q, secrets %v", c.Image, c.ImagePullPolicy, pod.ImagePullSecrets)
		}
		if _, ok := pod.NodeSelector["node-role.kubernetes.io/worker"]; !ok || pod.PriorityClassName != "" {
			t.Errorf("handler node selector %v, priority class %q", pod.NodeSelector, pod.PriorityClassName)
		}
		if !slices.Contains(c.Args, "--failed-requeue=1m") || len(c.Env) != 2 || c.Env[1].Value != "/var/lib/x.yaml" ||
			len(c.VolumeMounts) != 2 || len(pod.Volumes) != 2 || pod.Volumes[1].HostPath.Path != "/var/lib/x" {
			t.Errorf("handler extras: args %v, env %v, mounts %v, volumes %v", c.Args, c.Env, c.VolumeMounts, pod.Volumes)
		}
		dep := typed[appsv1.Deployment](t, objs, "Deployment", "nmstate-ippool-pool-controller")
		pc := dep.Spec.Template.Spec.Containers[0]
		if *dep.Spec.Replicas != 3 || pc.Image != "registry.example.com/ippool/pool-controller:v0.1.0" ||
			!slices.Contains(pc.Args, "--gc-grace-period=10m") || !slices.Contains(pc.Args, "--quarantine-period=1h") {
			t.Errorf("pool controller: %d replicas, image %q, args %v", *dep.Spec.Replicas, pc.Image, pc.Args)
		}
	})
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// TestHelmRefusesBadValues: each mistake an admin can make in the values
// is refused by the chart's schema, with the value named, before anything
// is rendered.
func TestHelmRefusesBadValues(t *testing.T) {
	const schema = "values don't meet the specifications of the schema"
	for _, tt := range []struct {
		set         []string
		want, want2 string
	}{
		{[]string{"mode=handlers"}, schema, "at '/mode': value must be one of 'handler', 'companion'"},
		{[]string{"webhook.certificate=certmanager"}, schema, "at '/webhook/certificate'"},
		{[]string{"webhook.certificate=provided"}, "webhook.caBundle is empty", "create the Secret nmstate-ippool-webhook-cert"},
		{[]string{"webhook.caBundle=Zm9v"}, "webhook.caBundle is set", "webhook.certificate=cert-manager injects the CA itself"},
		{[]string{"poolControler.replicas=3"}, schema, "additional properties 'poolControler' not allowed"},
		{[]string{"poolController.replicas=0"}, schema, "at '/poolController/replicas'"},
		{[]string{"poolController.gcGracePeriod=2 minutes"}, schema, "at '/poolController/gcGracePeriod'"},
		{[]string{"image.pullPolicy=Sometimes"}, schema, "at '/image/pullPolicy'"},
	} {
		out, err := runHelm(t, append([]string{"template", "nmstate-ippool", chart}, sets(tt.set...)...)...)
		if err == nil {
			t.Errorf("--set %v: rendered:\n%.300s", tt.set, out)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.want2) {
			t.Errorf("--set %v: the error does not say %q and %q:\n%v", tt.set, tt.want, tt.want2, err)
		}
	}
}
