package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/enactmentwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/poolwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// kustomize returns the kustomize binary, building the pinned one if
// `make tools` has not.
func kustomize(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(envtest.RepoRoot(), "bin", "kustomize")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	bin = filepath.Join(t.TempDir(), "kustomize")
	cmd := exec.Command("go", "build", "-o", bin, "sigs.k8s.io/kustomize/kustomize/v5")
	cmd.Dir = filepath.Join(envtest.RepoRoot(), "hack", "tools")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kustomize: %v\n%s", err, out)
	}
	return bin
}

// render runs kustomize build on a directory of deploy/ and decodes the
// objects.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(kustomize(t), "build", filepath.Join(envtest.RepoRoot(), "deploy", dir)).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("kustomize build deploy/%s: %v\n%s", dir, err, exit.Stderr)
		}
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
	return objs
}

// TestInstallDryRun renders deploy/default and deploy/samples and applies
// every object to a real API server: the namespace for real, the rest with
// a server-side dry run, so the API server validates each of them (pod
// specs, RBAC references, the NodeIPPool's CEL rules) without running them.
func TestInstallDryRun(t *testing.T) {
	install := render(t, "default")
	c := dryRun(t, install)
	ctx := context.Background()
	var kinds []string
	for _, o := range install {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	for _, want := range []string{"Namespace/nmstate-ippool", "DaemonSet/nmstate-ippool-handler", "Deployment/nmstate-ippool-pool-controller",
		"ValidatingWebhookConfiguration/nmstate-ippool", "Service/nmstate-ippool-webhook", "Certificate/nmstate-ippool-webhook",
		"CustomResourceDefinition/nodeippools.nmstate.io", "CustomResourceDefinition/nodenetworkstates.nmstate.io",
		"ClusterRole/nmstate-ippool-handler", "ClusterRole/nmstate-ippool-pool-controller", "Role/nmstate-ippool-leader-election"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the install lacks %s; it has %v", want, kinds)
		}
	}
	for _, dir := range []string{"samples", "samples/routed"} {
		for _, o := range render(t, dir) {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("deploy-test"), client.DryRunAll); err != nil {
				t.Errorf("apply sample %s %s of deploy/%s: %v", o.GetKind(), o.GetName(), dir, err)
			}
		}
	}
}

// dryRun applies objs to a real API server that has the project's CRDs
// (kubernetes-nmstate's among them, as its operator installs them) and
// cert-manager's: the namespaces for real, the rest with a server-side dry
// run, so the API server validates each of them without running them. It
// returns a client of that server.
func dryRun(t *testing.T, objs []*unstructured.Unstructured) client.Client {
	t.Helper()
	env, err := envtest.Start(func(e *ctrlenvtest.Environment) error {
		e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, filepath.Join(envtest.RepoRoot(), "deploy", "testdata", "cert-manager-crds.yaml"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		opts := []client.ApplyOption{client.FieldOwner("deploy-test"), client.ForceOwnership}
		if o.GetKind() != "Namespace" {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o), opts...); err != nil {
			t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	return c
}

// typed converts a rendered object of kind to T.
func typed[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			var out T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &out); err != nil {
				t.Fatal(err)
			}
			return &out
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// TestEmbeddedCRDs: the Go side of deploy carries every CRD of deploy/crd.
func TestEmbeddedCRDs(t *testing.T) {
	crds, err := deploy.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	want := []string{"nodeippools.nmstate.io", "nodenetworkconfigurationenactments.nmstate.io",
		"nodenetworkconfigurationpolicies.nmstate.io", "nodenetworkstates.nmstate.io", "poolednodenetworkconfigurationpolicies.nmstate.io"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("embedded CRDs %v, want %v", names, want)
	}
}

// TestWebhookWiring: the webhook configuration reaches the pool controller
// through the Service on the path it serves, the certificate cert-manager
// issues is the one the controller mounts and the one whose CA is
// injected, and a range change fails closed while creations fail open.
func TestWebhookWiring(t *testing.T) {
	objs := render(t, "default")
	w := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "nmstate-ippool")
	svc := typed[corev1.Service](t, objs, "Service", "nmstate-ippool-webhook")
	cert := typed[unstructured.Unstructured](t, objs, "Certificate", "nmstate-ippool-webhook")
	dep := typed[appsv1.Deployment](t, objs, "Deployment", "nmstate-ippool-pool-controller")

	if got, want := w.Annotations["cert-manager.io/inject-ca-from"], cert.GetNamespace()+"/"+cert.GetName(); got != want {
		t.Errorf("inject-ca-from %q, want the Certificate %q", got, want)
	}
	policies := map[string]admissionregistrationv1.FailurePolicyType{}
	for _, h := range w.Webhooks {
		path := poolwebhook.Path
		if strings.HasSuffix(h.Name, ".nodenetworkconfigurationenactments.nmstate.io") {
			path = enactmentwebhook.Path
		}
		s := h.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != svc.Namespace || s.Path == nil || *s.Path != path {
			t.Errorf("webhook %s calls %+v, want service %s/%s path %s", h.Name, s, svc.Namespace, svc.Name, path)
		}
		policies[h.Name] = *h.FailurePolicy
	}
	if policies["range.nodeippools.nmstate.io"] != admissionregistrationv1.Fail || policies["reservations.nodeippools.nmstate.io"] != admissionregistrationv1.Ignore ||
		policies["names.nodenetworkconfigurationenactments.nmstate.io"] != admissionregistrationv1.Fail {
		t.Errorf("failure policies %v: a range change and an enactment's name must fail closed, the rest open", policies)
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	pod := dep.Spec.Template.Spec
	mounted := false
	for _, v := range pod.Volumes {
		mounted = mounted || (v.Secret != nil && v.Secret.SecretName == secret)
	}
	if !mounted || !slices.Contains(pod.Containers[0].Args, "--webhook-port=9443") {
		t.Errorf("the controller does not mount the certificate's secret %q or serve on 9443: volumes %+v, args %v", secret, pod.Volumes, pod.Containers[0].Args)
	}
	if svc.Spec.Ports[0].TargetPort.String() != "webhook" || !slices.ContainsFunc(pod.Containers[0].Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "webhook" && p.ContainerPort == 9443
	}) {
		t.Errorf("the Service targets %v; the container's ports are %+v", svc.Spec.Ports[0].TargetPort, pod.Containers[0].Ports)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Containers != nil && dep.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the controller's pods do not carry", k, v)
		}
	}
	embedded, err := deploy.ValidatingWebhook()
	if err != nil || len(embedded.Webhooks) != len(w.Webhooks) {
		t.Errorf("embedded webhook configuration: %v, %d entries", err, len(embedded.Webhooks))
	}
}

// TestLocalOverlay: deploy/local, the install the local cluster's real
// nodes run, is deploy/default with other images and nmstatectl-sim for
// nmstatectl, which keeps each node's network in a host directory. Every
// other object and field, the RBAC among them, is deploy/default's.
func TestLocalOverlay(t *testing.T) {
	key := func(u *unstructured.Unstructured) string {
		return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
	}
	want := map[string]*unstructured.Unstructured{}
	for _, u := range render(t, "default") {
		want[key(u)] = u
	}
	local := render(t, "local")
	if len(local) != len(want) {
		t.Errorf("deploy/local has %d objects, deploy/default %d", len(local), len(want))
	}
	images := map[string]string{
		"localhost/nmstate-ippool/handler:local":         "ghcr.io/nmstate-ippool/handler:latest",
		"localhost/nmstate-ippool/pool-controller:local": "ghcr.io/nmstate-ippool/pool-controller:latest",
	}
	for _, u := range local {
		def, ok := want[key(u)]
		if !ok {
			t.Errorf("deploy/local adds %s", key(u))
			continue
		}
		if u.GetKind() == "Deployment" || u.GetKind() == "DaemonSet" {
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				c := c.(map[string]any)
				if images[c["image"].(string)] == "" {
					t.Errorf("%s: image %v is not one make images-local builds", key(u), c["image"])
				}
				c["image"] = images[c["image"].(string)]
			}
			if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				t.Fatal(err)
			}
		}
		if u.GetKind() == "DaemonSet" {
			u = undoSimulator(t, u)
		}
		if got, err := u.MarshalJSON(); err != nil {
			t.Fatal(err)
		} else if wantJSON, _ := def.MarshalJSON(); !bytes.Equal(got, wantJSON) {
			t.Errorf("deploy/local changes %s beyond its images and nmstatectl:\n%s\nwant\n%s", key(u), got, wantJSON)
		}
	}
}

// undoSimulator checks the handler's switch to nmstatectl-sim with its
// state on the host, and returns the DaemonSet without it.
func undoSimulator(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
		t.Fatal(err)
	}
	pod := &ds.Spec.Template.Spec
	c := &pod.Containers[0]
	if c.Args[0] != "--nmstatectl=/usr/local/bin/nmstatectl-sim" {
		t.Errorf("handler: first argument %q, want nmstatectl-sim", c.Args[0])
	}
	c.Args[0] = "--nmstatectl=/usr/bin/nmstatectl"
	last := c.Env[len(c.Env)-1]
	if last.Name != "NMSTATECTL_SIM_STATE" || last.Value != "/var/lib/nmstate-ippool-local/$(NODE_NAME).yaml" {
		t.Errorf("handler: the simulator's state is not per node on the host: %+v", last)
	}
	c.Env = c.Env[:len(c.Env)-1]
	mount, volume := c.VolumeMounts[len(c.VolumeMounts)-1], pod.Volumes[len(pod.Volumes)-1]
	if mount.Name != volume.Name || volume.HostPath == nil || volume.HostPath.Path != mount.MountPath {
		t.Errorf("handler: the simulator's state directory is not the host's: %+v, %+v", mount, volume)
	}
	c.VolumeMounts, pod.Volumes = c.VolumeMounts[:len(c.VolumeMounts)-1], pod.Volumes[:len(pod.Volumes)-1]
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds)
	if err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(raw, "status") // the round trip's zero status
	unstructured.RemoveNestedField(raw, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(raw, "spec", "template", "metadata", "creationTimestamp")
	return &unstructured.Unstructured{Object: raw}
}

// TestSelfAllocateOverlay: deploy/self-allocate is deploy/default with
// --self-allocate, the pool controller's --hold-carried-addresses (the
// handlers do not look at what other nodes carry) and the handler among
// the allocation writers (the one permission it needs, and admission's
// leave to use it); deploy/default has none of them.
func TestSelfAllocateOverlay(t *testing.T) {
	for _, tt := range []struct {
		dir  string
		self bool
	}{{"default", false}, {"self-allocate", true}} {
		objs := render(t, tt.dir)
		ds := typed[appsv1.DaemonSet](t, objs, "DaemonSet", "nmstate-ippool-handler")
		if got := slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--self-allocate"); got != tt.self {
			t.Errorf("deploy/%s: the handler runs with --self-allocate: %v, want %v", tt.dir, got, tt.self)
		}
		pc := typed[appsv1.Deployment](t, objs, "Deployment", "nmstate-ippool-pool-controller")
		if got := slices.Contains(pc.Spec.Template.Spec.Containers[0].Args, "--hold-carried-addresses"); got != tt.self {
			t.Errorf("deploy/%s: the pool controller runs with --hold-carried-addresses: %v, want %v", tt.dir, got, tt.self)
		}
		b := typed[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "nmstate-ippool-allocation-writers")
		role := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", b.RoleRef.Name)
		granted := allows(role, "nodeippools/status", "update") &&
			slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "nmstate-ippool-handler", Namespace: "nmstate-ippool"})
		if granted != tt.self {
			t.Errorf("deploy/%s: the handler's service account may update pool status: %v, want %v", tt.dir, granted, tt.self)
		}
	}
}

// TestCompanionInstall renders deploy/companion (IP pools beside
// kubernetes-nmstate's handler) and applies it with a server-side dry run
// to an API server that has kubernetes-nmstate's CRDs already, as its
// operator installs them: it brings only the pool controller, in
// companion mode, with its webhook, RBAC, our two CRDs and the admission
// policies that keep allocation state and its Node patches to it and
// kubernetes-nmstate's handler from pools and policies, and never
// kubernetes-nmstate's CRDs, a handler or an admission policy for ours.
func TestCompanionInstall(t *testing.T) {
	objs := render(t, "companion")
	var crds, kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o.GetName())
		}
	}
	slices.Sort(crds)
	if want := []string{"nodeippools.nmstate.io", "poolednodenetworkconfigurationpolicies.nmstate.io"}; !slices.Equal(crds, want) {
		t.Errorf("CRDs %v, want only %v: kubernetes-nmstate's are its operator's", crds, want)
	}
	if slices.Contains(kinds, "DaemonSet") {
		t.Errorf("companion mode runs no handler of ours, yet the install has a DaemonSet")
	}
	// The admission policies are those that keep allocation state to the
	// pool controller, node-bound credentials to their own node's objects
	// (kubernetes-nmstate's handler holds nmstate.io/*), kubernetes-nmstate's
	// handler from pools, pooled policies and NNCPs, and the pool
	// controller's Node patches to its finalizer.
	for _, o := range objs {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && !slices.Contains([]string{"nmstate-ippool-allocation-state",
			"nmstate-ippool-node-bound-own-node", "nmstate-ippool-pool-controller-nodes", "nmstate-ippool-upstream-handler"}, o.GetName()) {
			t.Errorf("companion mode runs no handler of ours, yet the install has %s %s", o.GetKind(), o.GetName())
		}
	}
	d := typed[appsv1.Deployment](t, objs, "Deployment", "nmstate-ippool-pool-controller")
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--mode=companion") {
		t.Errorf("pool controller args %v: want --mode=companion", args)
	}

	c := dryRun(t, objs)
	ctx := context.Background()
	for _, o := range render(t, "samples/companion") {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("deploy-test"), client.DryRunAll); err != nil {
			t.Errorf("apply sample %s %s of deploy/samples/companion: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// TestCompanionSampleIsTheNNCP: the companion sample is the handler
// mode's sample with only its kind changed, and the same pool.
func TestCompanionSampleIsTheNNCP(t *testing.T) {
	handler, companion := render(t, "samples"), render(t, "samples/companion")
	if len(handler) != len(companion) {
		t.Fatalf("%d objects in deploy/samples, %d in deploy/samples/companion", len(handler), len(companion))
	}
	for i := range handler {
		h, c := handler[i].DeepCopy(), companion[i].DeepCopy()
		if c.GetKind() == "PooledNodeNetworkConfigurationPolicy" {
			c.SetKind("NodeNetworkConfigurationPolicy")
		}
		if !equality.Semantic.DeepEqual(h.Object, c.Object) {
			t.Errorf("%s %s differs from the handler mode's beyond its kind:\n%v\n%v", companion[i].GetKind(), c.GetName(), h.Object, c.Object)
		}
	}
}

// TestInstallNamesPushedImages: make install-manifests with REGISTRY and
// TAG renders every install with the images make push pushed, and
// nothing else changed; with only one of the two it refuses.
func TestInstallNamesPushedImages(t *testing.T) {
	script := filepath.Join(envtest.RepoRoot(), "hack", "install-manifests.sh")
	for _, install := range []string{"default", "companion", "self-allocate"} {
		out, err := exec.Command(script, kustomize(t), install, "registry.example.com/acme/", "v0.1.0").Output()
		if err != nil {
			t.Fatalf("%s: %v", install, err)
		}
		images := regexpImage.FindAllStringSubmatch(string(out), -1)
		if len(images) == 0 {
			t.Fatalf("%s: no image rendered", install)
		}
		for _, m := range images {
			if !strings.HasPrefix(m[1], "registry.example.com/acme/") || !strings.HasSuffix(m[1], ":v0.1.0") {
				t.Errorf("%s: image %s is not the pushed one", install, m[1])
			}
		}
		if plain := render(t, install); len(plain) != strings.Count(string(out), "\n---\n")+1 {
			t.Errorf("%s: %d objects rendered plainly, %d with the pushed images", install, len(plain), strings.Count(string(out), "\n---\n")+1)
		}
	}
	out, err := exec.Command(script, kustomize(t), "default", "registry.example.com/acme").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "give both REGISTRY and TAG") {
		t.Fatalf("REGISTRY without TAG: %v\n%s", err, out)
	}
}

var regexpImage = regexp.MustCompile(`(?m)^\s+image: (\S+)$`)
