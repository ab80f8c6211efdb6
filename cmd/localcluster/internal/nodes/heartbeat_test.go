package nodes

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestBeat: a heartbeat posts what a kubelet posts for the node lifecycle
// controller: the node's Lease, created owned by its Node and then
// renewed, and its Ready condition back to True once the controller has
// turned it Unknown. A node without a Node posts nothing.
func TestBeat(t *testing.T) {
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k, err := envtest.ClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: corev1.NamespaceNodeLease}}
	if err := k.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := Beat(ctx, k, "absent", 10*time.Second); err != nil {
		t.Fatalf("a node without a Node: %v", err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if err := k.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	lease := func() *coordinationv1.Lease {
		t.Helper()
		var l coordinationv1.Lease
		if err := k.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "n1"}, &l); err != nil {
			t.Fatal(err)
		}
		return &l
	}
	readyOf := func() corev1.ConditionStatus {
		t.Helper()
		var n corev1.Node
		if err := k.Get(ctx, client.ObjectKey{Name: "n1"}, &n); err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}

	if err := Beat(ctx, k, "n1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	first := lease()
	if first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity != "n1" || first.Spec.RenewTime == nil ||
		len(first.OwnerReferences) != 1 || first.OwnerReferences[0].UID != node.UID {
		t.Fatalf("lease after the first beat: %+v, owners %+v", first.Spec, first.OwnerReferences)
	}
	if got := readyOf(); got != corev1.ConditionTrue {
		t.Fatalf("Ready %q after a beat, want True", got)
	}

	// The node lifecycle controller turns it Unknown; the next beat
	// renews the Lease and makes it Ready again.
	var n corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: "n1"}, &n); err != nil {
		t.Fatal(err)
	}
	setReady(&n, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
	if err := k.Status().Update(ctx, &n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a later MicroTime
	if err := Beat(ctx, k, "n1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := readyOf(); got != corev1.ConditionTrue {
		t.Errorf("Ready %q after a beat of a node turned Unknown, want True", got)
	}
	if renewed := lease().Spec.RenewTime; !renewed.After(first.Spec.RenewTime.Time) {
		t.Errorf("lease renewed at %v, not after the first beat's %v", renewed, first.Spec.RenewTime)
	}
}
