package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admissionpolicies"
	"github.com/nmstate-ippool/nmstate-ippool/internal/statuswebhook"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// bundleDir is the OLM bundle hack/olm writes.
var bundleDir = filepath.Join(envtest.RepoRoot(), "deploy", "olm", "bundle")

// olm returns hack/olm's binary.
func olm(t *testing.T) string { return tool(t, "olm") }

// TestOLMBundleValidates runs operator-framework's validation (the bundle,
// its CSV and CRDs, OperatorHub's rules, good practices, the APIs of the
// Kubernetes version the project is tested on) on the bundle, warnings
// included.
func TestOLMBundleValidates(t *testing.T) {
	out, err := exec.Command(olm(t), "validate", "-strict", "-k8s-version", "1.34", bundleDir).CombinedOutput()
	if err != nil {
		t.Fatalf("olm validate: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// bundleCSV returns the bundle's ClusterServiceVersion.
func bundleCSV(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	objs := decodeAll(t, readFile(t, filepath.Join(bundleDir, "manifests", "nmstate-ippool.clusterserviceversion.yaml")))
	if len(objs) != 1 || objs[0].GetKind() != "ClusterServiceVersion" {
		t.Fatalf("the bundle's CSV file holds %d objects", len(objs))
	}
	return objs[0]
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	return raw
}

// csvDeployment returns the pool controller's Deployment spec in the CSV.
func csvDeployment(t *testing.T, csv *unstructured.Unstructured) map[string]any {
	t.Helper()
	deployments, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
	if len(deployments) != 1 {
		t.Fatalf("the CSV installs %d Deployments, want the pool controller's", len(deployments))
	}
	return deployments[0].(map[string]any)
}

// TestOLMBundleIsCompanionMode checks what the bundle changes of
// deploy/companion's pool controller, and what it leaves to it: it runs
// in companion mode with the certificate OLM mounts, and installs the
// admission policies deploy/companion installs, no more and no less.
func TestOLMBundleIsCompanionMode(t *testing.T) {
	d := csvDeployment(t, bundleCSV(t))
	containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"--mode=companion", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
		"--install-admission-policies=nmstate-ippool-allocation-writer", "--leader-elect"} {
		if !slices.Contains(args, want) {
			t.Errorf("the CSV's pool controller runs without %s: %v", want, args)
		}
	}
	if volumes, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "volumes"); len(volumes) > 0 {
		t.Errorf("the CSV's pool controller mounts %v: OLM mounts the webhook's certificate, cert-manager's Secret is not made", volumes)
	}
	if _, err := os.Stat(filepath.Join(bundleDir, "manifests", "nmstate-ippool-allocation-writer_rbac.authorization.k8s.io_v1_clusterrole.yaml")); err != nil {
		t.Errorf("the bundle does not ship the ClusterRole the identity bindings bind: %v", err)
	}

	embedded, err := deploy.CompanionAdmissionPolicies()
	must(t, err)
	var rendered []*unstructured.Unstructured
	for _, o := range render(t, "companion") {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			rendered = append(rendered, o)
		}
	}
	if len(embedded) != len(rendered) {
		t.Fatalf("the pool controller installs %d admission objects, deploy/companion %d", len(embedded), len(rendered))
	}
	for _, want := range rendered {
		i := slices.IndexFunc(embedded, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == want.GetKind() && o.GetName() == want.GetName()
		})
		if i < 0 {
			t.Errorf("the pool controller does not install %s %s", want.GetKind(), want.GetName())
			continue
		}
		// kustomize writes some folded expressions with blank lines: the
		// same CEL.
		if !equality.Semantic.DeepEqual(blanksFolded(embedded[i].Object["spec"]), blanksFolded(want.Object["spec"])) {
			t.Errorf("%s %s: the pool controller installs another spec than deploy/companion", want.GetKind(), want.GetName())
		}
	}
}

// blanksFolded returns v with each string's runs of white space as one
// space.
func blanksFolded(v any) any {
	switch v := v.(type) {
	case string:
		return strings.Join(strings.Fields(v), " ")
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = blanksFolded(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = blanksFolded(e)
		}
		return out
	}
	return v
}

// TestOLMInstallGuardsAllocationState installs the bundle as OLM does, in
// a namespace of the admin's choosing: the bundle's ClusterRoles, and the
// CSV's permissions as roles bound to the pool controller's service
// account. The pool controller's installer, acting with a pod-bound
// token of that account and only those permissions, installs the
// admission policies and its identity bindings, owned by the bundle's
// ClusterRole, and is then ready. A service account that holds every
// right on nmstate.io (as kubernetes-nmstate's handler does) is refused
// the pool's status; the pool controller writes it. A policy deleted by
// hand is back at the installer's next pass.
func TestOLMInstallGuardsAllocationState(t *testing.T) {
	env, err := envtest.Start()
	must(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)

	csv := bundleCSV(t)
	namespace := "openshift-operators"
	sa, _, _ := unstructured.NestedString(csvDeployment(t, csv), "spec", "template", "spec", "serviceAccountName")
	controller := account{Namespace: namespace, Name: sa}
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: namespace}}))
	entries, err := os.ReadDir(filepath.Join(bundleDir, "manifests"))
	must(t, err)
	for _, e := range entries {
		for _, o := range decodeAll(t, readFile(t, filepath.Join(bundleDir, "manifests", e.Name()))) {
			switch o.GetKind() {
			case "ClusterServiceVersion", "CustomResourceDefinition": // envtest installs the CRDs
			default:
				if o.GetKind() == "Service" {
					o.SetNamespace(namespace)
				}
				must(t, admin.Create(ctx, o))
			}
		}
	}
	// OLM binds the CSV's cluster permissions to the service account.
	perms, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "clusterPermissions")
	if len(perms) != 1 {
		t.Fatalf("the CSV has %d cluster permissions, want the pool controller's", len(perms))
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "olm-generated"}, "rules": perms[0].(map[string]any)["rules"]}}
	must(t, admin.Create(ctx, u))
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "olm-generated"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "olm-generated"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}}}))

	// A holder of every right on nmstate.io, as kubernetes-nmstate's
	// handler is.
	hostile := account{Namespace: namespace, Name: "everything-nmstate"}
	must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: hostile.Name, Namespace: namespace}}))
	must(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: hostile.Name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"nmstate.io"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}))
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: hostile.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hostile.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: hostile.Name, Namespace: namespace}}}))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp1"}}
	must(t, admin.Create(ctx, node))
	controllerToken := podToken(ctx, t, env.Config, admin, controller, node)
	asController := tokenClient(t, env, controllerToken)
	// Not bound to a pod on a node: the allocation-state policy alone
	// refuses it.
	cs, err := kubernetes.NewForConfig(env.Config)
	must(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, hostile.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	must(t, err)
	asHostile := tokenClient(t, env, tr.Status.Token)

	self, err := statuswebhook.WhoAmI(ctx, envtest.BearerConfig(env.Config, controllerToken))
	must(t, err)
	subject, err := admissionpolicies.ServiceAccount(self)
	must(t, err)
	policies, err := deploy.CompanionAdmissionPolicies()
	must(t, err)
	installer := &admissionpolicies.Installer{Client: asController, Owner: "nmstate-ippool-allocation-writer",
		Subject: subject, Policies: policies, Interval: 500 * time.Millisecond}
	if installer.Checker(nil) == nil {
		t.Fatal("ready before the admission policies are installed")
	}
	done := make(chan error, 1)
	go func() { done <- installer.Start(logr.NewContext(ctx, testr.New(t))) }()
	deadline := time.Now().Add(time.Minute)
	for installer.Checker(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the installer is not ready after a minute (its errors are in the log)")
		}
		time.Sleep(100 * time.Millisecond)
	}

	var owner rbacv1.ClusterRole
	must(t, admin.Get(ctx, client.ObjectKey{Name: installer.Owner}, &owner))
	for _, p := range policies {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(p.GroupVersionKind())
		must(t, admin.Get(ctx, client.ObjectKey{Name: p.GetName()}, got))
		if refs := got.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != owner.UID {
			t.Errorf("%s %s is owned by %v, want ClusterRole %s", p.GetKind(), p.GetName(), refs, owner.Name)
		}
	}
	for identity, name := range map[string]string{"allocation-writers": "nmstate-ippool-allocation-writers", "pool-controller": "nmstate-ippool-pool-controller"} {
		var b rbacv1.ClusterRoleBinding
		must(t, admin.Get(ctx, client.ObjectKey{Name: name}, &b))
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}}
		if b.Labels[admissionpolicies.IdentityLabel] != identity || !equality.Semantic.DeepEqual(b.Subjects, want) {
			t.Errorf("ClusterRoleBinding %s: labels %v, subjects %v; want %s=%s and %v", name, b.Labels, b.Subjects,
				admissionpolicies.IdentityLabel, identity, want)
		}
	}

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "traffic-1"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
	must(t, admin.Create(ctx, pool))
	awaitAllocationStateGuarded(ctx, t, admin, asHostile, pool)
	p := fetch(ctx, t, admin, pool)
	p.Status.ObservedGeneration = 5
	if err := asHostile.Status().Update(ctx, p); err == nil || !strings.Contains(err.Error(), "allocation state is written only by the pool controller") {
		t.Fatalf("a holder of every right on nmstate.io wrote the pool's status, or was refused for another reason: %v", err)
	}
	p = fetch(ctx, t, admin, pool)
	p.Status.ObservedGeneration = 7
	if err := asController.Status().Update(ctx, p); err != nil {
		t.Fatalf("the pool controller may not write the pool's status: %v", err)
	}

	// Deleted by hand, back at the next pass.
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nmstate-ippool-allocation-state"}}
	must(t, admin.Delete(ctx, vap))
	deadline = time.Now().Add(time.Minute)
	for {
		err := admin.Get(ctx, client.ObjectKeyFromObject(vap), vap)
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("the allocation-state policy deleted by hand is not back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("the installer stopped with %v", err)
	}
}
