package deploy_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestHelmInstallAndUpgrade installs the chart with the real Helm on a
// real API server, upgrades it, and uninstalls it:
//   - a cluster coming from kubernetes-nmstate has its NNCP CRD already,
//     which Helm refuses to take over until the admin labels it as the
//     docs/install.md says; then the install succeeds and the CRD keeps its
//     objects;
//   - an upgrade changes what the values change;
//   - an uninstall removes the install but keeps the CRDs, and so every
//     pool and record.
func TestHelmInstallAndUpgrade(t *testing.T) {
	env, c, kubeconfig := envtest.Cluster(t, withoutCRDs)
	ctx := context.Background()

	// kubernetes-nmstate's NNCP CRD, as its operator left it, with a
	// policy.
	crds, err := deploy.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	nncp := crds[slices.IndexFunc(crds, func(c *apiextensionsv1.CustomResourceDefinition) bool {
		return c.Name == "nodenetworkconfigurationpolicies.nmstate.io"
	})]
	if err := c.Create(ctx, nncp); err != nil {
		t.Fatal(err)
	}
	if err := ctrlenvtest.WaitForCRDs(env.Config, []*apiextensionsv1.CustomResourceDefinition{nncp}, ctrlenvtest.CRDInstallOptions{PollInterval: 100 * time.Millisecond, MaxTime: time.Minute}); err != nil {
		t.Fatal(err)
	}
	policy := upstreamPolicy(ctx, t, c)

	ca := base64.StdEncoding.EncodeToString([]byte("a CA"))
	install := []string{"install", "nmstate-ippool", chart, "--kubeconfig", kubeconfig, "--namespace", "nmstate-ippool", "--create-namespace",
		"--set", "webhook.certificate=provided", "--set", "webhook.caBundle=" + ca, "--wait=false"}
	_, err = runHelm(t, install...)
	if err == nil || !strings.Contains(err.Error(), "nodenetworkconfigurationpolicies.nmstate.io") || !strings.Contains(err.Error(), "invalid ownership metadata") {
		t.Fatalf("helm took kubernetes-nmstate's CRD over without being asked, or failed otherwise: %v", err)
	}
	t.Logf("first install: %v", err)
	// The adoption of docs/install.md: label and annotate the CRDs the operator
	// installed, then install.
	if err := c.Get(ctx, client.ObjectKeyFromObject(nncp), nncp); err != nil {
		t.Fatal(err)
	}
	nncp.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
	nncp.Annotations = map[string]string{"meta.helm.sh/release-name": "nmstate-ippool", "meta.helm.sh/release-namespace": "nmstate-ippool"}
	if err := c.Update(ctx, nncp); err != nil {
		t.Fatal(err)
	}
	if _, err := runHelm(t, install...); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "nmstate-ippool", Name: "nmstate-ippool-pool-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Errorf("the policy did not survive the CRD's adoption: %v", err)
	}

	if _, err := runHelm(t, "upgrade", "nmstate-ippool", chart, "--kubeconfig", kubeconfig, "--namespace", "nmstate-ippool",
		"--reuse-values", "--set", "poolController.replicas=3", "--set", "image.tag=v0.2.0"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 || dep.Spec.Template.Spec.Containers[0].Image != "ghcr.io/nmstate-ippool/pool-controller:v0.2.0" {
		t.Errorf("after the upgrade: %d replicas of %s", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Image)
	}
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "nmstate-ippool", Name: "nmstate-ippool-handler"}, ds); err != nil {
		t.Fatal(err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/nmstate-ippool/handler:v0.2.0" {
		t.Errorf("after the upgrade the handler runs %s", got)
	}

	if _, err := runHelm(t, "uninstall", "nmstate-ippool", "--kubeconfig", kubeconfig, "--namespace", "nmstate-ippool", "--wait"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), dep); !apierrors.IsNotFound(err) {
		t.Errorf("the pool controller outlived the uninstall: %v", err)
	}
	for _, name := range []string{"nodeippools.nmstate.io", "poolednodenetworkconfigurationpolicies.nmstate.io", "nodenetworkconfigurationpolicies.nmstate.io"} {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s was not kept: %v", name, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Errorf("the policy did not survive the uninstall: %v", err)
	}
}

// TestHelmInstallCompanionMode installs the chart in companion mode, as
// docs/install.md tells an admin who runs kubernetes-nmstate: beside its
// operator's CRDs and a policy, which the release neither needs to adopt
// nor touches. It runs the pool controller in companion mode and no
// handler, installs companion mode's admission policies, and leaves
// kubernetes-nmstate's CRDs and policy as they were, through the
// uninstall too.
func TestHelmInstallCompanionMode(t *testing.T) {
	env, c, kubeconfig := envtest.Cluster(t, withoutCRDs)
	ctx := context.Background()
	crds, err := deploy.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var upstream []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range crds {
		if slices.Contains([]string{"nodenetworkconfigurationpolicies.nmstate.io", "nodenetworkconfigurationenactments.nmstate.io",
			"nodenetworkstates.nmstate.io"}, crd.Name) {
			if err := c.Create(ctx, crd); err != nil {
				t.Fatal(err)
			}
			upstream = append(upstream, crd)
		}
	}
	if len(upstream) != 3 {
		t.Fatalf("deploy/crd has %d of kubernetes-nmstate's CRDs", len(upstream))
	}
	if err := ctrlenvtest.WaitForCRDs(env.Config, upstream, ctrlenvtest.CRDInstallOptions{PollInterval: 100 * time.Millisecond, MaxTime: time.Minute}); err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, crd := range upstream {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			t.Fatal(err)
		}
		versions[crd.Name] = crd.ResourceVersion
	}
	policy := upstreamPolicy(ctx, t, c)

	ca := base64.StdEncoding.EncodeToString([]byte("a CA"))
	if _, err := runHelm(t, "install", "nmstate-ippool", chart, "--kubeconfig", kubeconfig, "--namespace", "infra-net", "--create-namespace",
		"--set", "mode=companion", "--set", "webhook.certificate=provided", "--set", "webhook.caBundle="+ca, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "infra-net", Name: "nmstate-ippool-pool-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--mode=companion") {
		t.Errorf("the pool controller runs with %v, not in companion mode", args)
	}
	var daemonSets appsv1.DaemonSetList
	if err := c.List(ctx, &daemonSets, client.InNamespace("infra-net")); err != nil || len(daemonSets.Items) > 0 {
		t.Errorf("companion mode installed %d DaemonSets (%v): kubernetes-nmstate's handler is the one on the nodes", len(daemonSets.Items), err)
	}
	for _, name := range []string{"nmstate-ippool-allocation-state", "nmstate-ippool-upstream-handler", "nmstate-ippool-node-bound-own-node",
		"nmstate-ippool-pool-controller-nodes"} {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.ValidatingAdmissionPolicy{}); err != nil {
			t.Errorf("companion mode's admission policy %s: %v", name, err)
		}
	}
	var writers rbacv1.ClusterRoleBinding
	if err := c.Get(ctx, client.ObjectKey{Name: "nmstate-ippool-allocation-writers"}, &writers); err != nil {
		t.Fatal(err)
	}
	if len(writers.Subjects) != 1 || writers.Subjects[0].Namespace != "infra-net" {
		t.Errorf("the allocation writers are %v, want the pool controller of the release's namespace", writers.Subjects)
	}

	if _, err := runHelm(t, "uninstall", "nmstate-ippool", "--kubeconfig", kubeconfig, "--namespace", "infra-net", "--wait"); err != nil {
		t.Fatal(err)
	}
	for _, crd := range upstream {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			t.Fatalf("kubernetes-nmstate's CRD %s is gone: %v", crd.Name, err)
		}
		if crd.ResourceVersion != versions[crd.Name] {
			t.Errorf("the release changed kubernetes-nmstate's CRD %s (labels %v, annotations %v)", crd.Name, crd.Labels, crd.Annotations)
		}
	}
	for _, name := range []string{"nodeippools.nmstate.io", "poolednodenetworkconfigurationpolicies.nmstate.io"} {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s was not kept: %v", name, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		t.Errorf("kubernetes-nmstate's policy did not survive: %v", err)
	}
}

// upstreamPolicy creates a NodeNetworkConfigurationPolicy of
// kubernetes-nmstate's, which an install must leave as it is.
func upstreamPolicy(ctx context.Context, t *testing.T, c client.Client) *unstructured.Unstructured {
	t.Helper()
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nmstate.io/v1", "kind": "NodeNetworkConfigurationPolicy",
		"metadata": map[string]any{"name": "eth1"},
		"spec":     map[string]any{"desiredState": map[string]any{"interfaces": []any{map[string]any{"name": "eth1", "type": "ethernet", "state": "up"}}}},
	}}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	return policy
}

// withoutCRDs starts envtest without the CRDs: the chart installs ours,
// a test kubernetes-nmstate's.
func withoutCRDs(e *ctrlenvtest.Environment) error {
	e.CRDDirectoryPaths = nil
	e.ErrorIfCRDPathMissing = false
	return nil
}
