package deploy_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestPoolControllerChangesNodesOnlyByItsFinalizer installs the access
// control of companion mode, and of an admin's overlay in another
// namespace under a name prefix, on a real API server each, and patches
// Nodes with a pod-bound token of the pool controller's service account.
// Adding and removing the finalizer nmstate.io/pooled-addresses passes;
// every other change its ClusterRole would allow (a label, an annotation,
// a taint, a cordon, another finalizer) is refused with a message naming
// the Node, and changes nothing. A cluster admin's changes pass.
func TestPoolControllerChangesNodesOnlyByItsFinalizer(t *testing.T) {
	for _, dir := range []string{"companion", "testdata/infra-net"} {
		t.Run(dir, func(t *testing.T) { poolControllerNodesConfined(t, dir) })
	}
}

func poolControllerNodesConfined(t *testing.T, dir string) {
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	installAccessControl(ctx, t, admin, dir)
	controller := poolControllerOf(t, dir)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"role": "worker"}}}
	must(t, admin.Create(ctx, node))
	asController := tokenClient(t, env, podToken(ctx, t, env.Config, admin, controller, node))

	// A merge patch, as the pool controller writes (its role grants
	// patch, not update), with the resourceVersion read: a conflict is
	// tried again.
	change := func(c client.Client, edit func(*corev1.Node)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var n corev1.Node
			if err := admin.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
				return err
			}
			base := n.DeepCopy()
			edit(&n)
			return c.Patch(ctx, &n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		})
	}
	addFinalizer := func(f string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Finalizers = append(n.Finalizers, f) }
	}
	// The policy is in force once the token's first refused change says so.
	deadline := time.Now().Add(time.Minute)
	for {
		err := change(asController, func(n *corev1.Node) { n.Labels["forged"] = "true" })
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool controller's Node policy is not in force after a minute: %v", err)
		}
		if err == nil {
			must(t, change(admin, func(n *corev1.Node) { delete(n.Labels, "forged") }))
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := change(asController, addFinalizer(ippoolv1.FinalizerPooledNode)); err != nil {
		t.Fatalf("adding its finalizer: %v", err)
	}
	for _, attack := range []struct {
		name string
		edit func(*corev1.Node)
	}{
		{"relabel", func(n *corev1.Node) { n.Labels["role"] = "infra" }},
		{"annotate", func(n *corev1.Node) { n.Annotations = map[string]string{"example.com/a": "b"} }},
		{"taint", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/t", Effect: corev1.TaintEffectNoSchedule})
		}},
		{"cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }},
		{"hold by another finalizer", addFinalizer("example.com/hold")},
		{"its finalizer with a label", func(n *corev1.Node) {
			n.Finalizers = nil
			n.Labels["role"] = "infra"
		}},
	} {
		before := fetch(ctx, t, admin, node.DeepCopy())
		err := change(asController, attack.edit)
		if err == nil || !strings.Contains(err.Error(), "may change Node w1 only by adding or removing its finalizer "+
			ippoolv1.FinalizerPooledNode) {
			t.Errorf("%s: want refused, naming the Node and the finalizer; got %v", attack.name, err)
		}
		after := fetch(ctx, t, admin, node.DeepCopy())
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the refused change changed the Node", attack.name)
		}
	}
	if err := change(asController, func(n *corev1.Node) {
		n.Finalizers = slices.DeleteFunc(n.Finalizers, func(f string) bool { return f == ippoolv1.FinalizerPooledNode })
	}); err != nil {
		t.Fatalf("removing its finalizer: %v", err)
	}
	if err := change(admin, func(n *corev1.Node) { n.Labels["role"] = "infra"; n.Spec.Unschedulable = true }); err != nil {
		t.Errorf("a cluster admin's change: %v", err)
	}
}

// poolControllerOf returns the service account the pool controller's
// Deployment runs as in the install dir renders.
func poolControllerOf(t *testing.T, dir string) account {
	t.Helper()
	for _, o := range render(t, dir) {
		if o.GetKind() == "Deployment" && strings.HasSuffix(o.GetName(), "pool-controller") {
			sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
			return account{Namespace: o.GetNamespace(), Name: sa}
		}
	}
	t.Fatalf("deploy/%s has no pool controller Deployment", dir)
	return account{}
}
