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
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/admissionpolicies"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/statuswebhook"
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
// in companion mode with the certificate OLM mounts and requires the
// admission policies deploy/companion installs, which deploy/olm/admission
// installs, no more and no less.
func TestOLMBundleIsCompanionMode(t *testing.T) {
	d := csvDeployment(t, bundleCSV(t))
	containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	for _, want := range []string{"--mode=companion", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
		"--require-admission-policies", "--leader-elect"} {
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
	companion := admissionObjects(render(t, "companion"))
	for name, objs := range map[string][]*unstructured.Unstructured{
		"the pool controller requires": embedded, "deploy/olm/admission installs": admissionObjects(render(t, "olm/admission"))} {
		if len(objs) != len(companion) {
			t.Errorf("%s %d admission objects, deploy/companion installs %d", name, len(objs), len(companion))
			continue
		}
		for _, want := range companion {
			i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == want.GetKind() && o.GetName() == want.GetName()
			})
			// kustomize writes some folded expressions with blank lines:
			// the same CEL.
			if i < 0 || !equality.Semantic.DeepEqual(blanksFolded(objs[i].Object["spec"]), blanksFolded(want.Object["spec"])) {
				t.Errorf("%s no %s %s as deploy/companion's", name, want.GetKind(), want.GetName())
			}
		}
	}
}

// admissionObjects returns the admission policies and their bindings.
func admissionObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool {
		return !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy")
	})
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
// CSV's permissions as a role bound to the pool controller's service
// account. With a pod-bound token of that account and only those
// permissions, the pool controller's check reads that the admission
// boundary is missing, and says what is (not ready); it may not write a
// policy or a ClusterRoleBinding. The admin applies deploy/olm/admission
// through an overlay of that namespace: the check passes, a holder of
// every right on nmstate.io is refused the pool's status, and the pool
// controller writes it. A policy deleted by hand makes it unready again.
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
	checker := &admissionpolicies.Checker{Reader: asController, Subject: subject, Policies: policies,
		Interval: 200 * time.Millisecond, Hint: "apply deploy/olm/admission"}
	if checker.Ready(nil) == nil {
		t.Fatal("ready before a check")
	}
	done := make(chan error, 1)
	go func() { done <- checker.Start(logr.NewContext(ctx, testr.New(t))) }()
	readiness := func() error {
		var err error
		for range 50 {
			if err = checker.Ready(nil); err == nil || !strings.Contains(err.Error(), "not been checked") {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}
	err = readiness()
	if err == nil || strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("with nothing installed, the check says %v; want what is missing", err)
	}
	for _, want := range []string{"ValidatingAdmissionPolicy nmstate-ippool-allocation-state", "ValidatingAdmissionPolicyBinding nmstate-ippool-upstream-handler",
		"nmstate.io/ippool-identity=allocation-writers whose subjects name service account " + namespace + "/" + sa,
		"nmstate.io/ippool-identity=pool-controller", "apply deploy/olm/admission"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the check's finding does not say %q: %v", want, err)
		}
	}

	// The pool controller's credentials cannot write the boundary.
	if err := asController.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nmstate-ippool-allocation-state"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: "true"}}}}); !apierrors.IsForbidden(err) {
		t.Errorf("the pool controller created an admission policy, or failed otherwise: %v", err)
	}
	if err := asController.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mine",
		Labels: map[string]string{admissionpolicies.IdentityLabel: "allocation-writers"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "nmstate-ippool-allocation-writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: hostile.Name, Namespace: namespace}}}); !apierrors.IsForbidden(err) {
		t.Errorf("the pool controller created a ClusterRoleBinding, or failed otherwise: %v", err)
	}

	// The admin's overlay of deploy/olm/admission, in the install's
	// namespace.
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, filepath.Join(envtest.RepoRoot(), "deploy", "olm", "admission"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte("namespace: "+namespace+"\nresources:\n- "+base+"\n"), 0o600))
	out, err := exec.Command(kustomize(t), "build", overlay).Output()
	must(t, err)
	for _, o := range decodeAll(t, out) {
		if err := admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("admin"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for checker.Ready(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready a minute after deploy/olm/admission was applied: %v", checker.Ready(nil))
		}
		time.Sleep(100 * time.Millisecond)
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

	// A policy deleted by hand: not ready again.
	must(t, admin.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nmstate-ippool-allocation-state"}}))
	deadline = time.Now().Add(time.Minute)
	for {
		err := checker.Ready(nil)
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy nmstate-ippool-allocation-state") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the allocation-state policy was deleted, the check says %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("the check stopped with %v", err)
	}
}
