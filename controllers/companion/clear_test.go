package companion

import (
	"context"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// TestClearEarlier: the enactment of node01.p-node01 goes before policy
// p-node01 is created only when it is an earlier policy's of that node and
// name, and nothing keeps it; otherwise it stays, and the create waits
// (the envtest TestEnactmentOfAnEarlierPolicyIsNotTakenUp runs the case
// where it goes, end to end; TestClearEarlierKeepsAnEnactmentChangedMeanwhile
// the delete's resourceVersion precondition, which the fake client
// ignores).
func TestClearEarlier(t *testing.T) {
	const node, name = "node01", "p-node01"
	enactment := func(adjust ...func(*nncev1beta1.NodeNetworkConfigurationEnactment)) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: shared.EnactmentKey(node, name).Name,
			Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: name}}}
		for _, f := range adjust {
			f(e)
		}
		return e
	}
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, tc := range []struct {
		name    string
		objects []client.Object
		// wantErr is a part of the error, "" for none; alreadyExists: the
		// create is looked at again.
		wantErr       string
		alreadyExists bool
		// gone: deleted for good; cleared: deleted, and ignored while
		// the cache shows it.
		gone, cleared bool
	}{
		{name: "no enactment of the name"},
		{name: "an earlier policy's: deleted", objects: []client.Object{enactment()}, gone: true, cleared: true},
		{name: "the policy exists (the cache is behind): kept", objects: []client.Object{enactment(), policy},
			wantErr: "already exists", alreadyExists: true},
		// Node "node01.p" of an admin's policy "node01" has enactment
		// "node01.p.node01"; so would node "node01" of pooled policy "p"
		// on a policy named "p.node01": here the labels tell them apart.
		{name: "another node's under a colliding name: kept", objects: []client.Object{enactment(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Labels[shared.EnactmentNodeLabel] = "node01.p"
			e.Labels[shared.EnactmentPolicyLabel] = "node01"
		})}, wantErr: `is node "node01.p"'s of policy "node01": the names collide`},
		{name: "a finalizer keeps it: the create waits", objects: []client.Object{enactment(func(e *nncev1beta1.NodeNetworkConfigurationEnactment) {
			e.Finalizers = []string{ippoolv1.FinalizerIPPool}
		})}, wantErr: "is being deleted and finalizers [nmstate.io/ippool] keep it", cleared: true},
	} {
		s, err := scheme.New()
		if err != nil {
			t.Fatal(err)
		}
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objects...).Build()
		r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10)}
		p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		err = r.clearEarlier(context.Background(), p, node, name)
		switch {
		case tc.wantErr == "" && err != nil, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: clearEarlier = %v, want an error with %q", tc.name, err, tc.wantErr)
		}
		if apierrors.IsAlreadyExists(err) != tc.alreadyExists {
			t.Errorf("%s: %v: the create would not be looked at again", tc.name, err)
		}
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		getErr := c.Get(context.Background(), shared.EnactmentKey(node, name), &e)
		gone := apierrors.IsNotFound(getErr)
		if len(tc.objects) > 0 && gone != tc.gone {
			t.Errorf("%s: enactment gone = %v, want %v", tc.name, gone, tc.gone)
		}
		if _, cleared := r.cleared.Load(shared.EnactmentKey(node, name).Name); cleared != tc.cleared {
			t.Errorf("%s: remembered as cleared = %v, want %v", tc.name, cleared, tc.cleared)
		}
	}
}
