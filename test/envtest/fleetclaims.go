package envtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// ClaimVersion is the version of Cluster API's IPAM kinds the fleets'
// claims are written at: the storage version of the CRDs
// ClusterAPICRDFiles installs.
const ClaimVersion = "v1beta2"

// UpArgsWithClusterAPI returns localcluster up's flags that install
// Cluster API's IPAM CRDs (ClusterAPICRDFiles), whose claims the pool
// controller then serves.
func UpArgsWithClusterAPI(t testing.TB) []string {
	t.Helper()
	files, err := ClusterAPICRDFiles()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, f := range files {
		args = append(args, "--crd", f)
	}
	return args
}

// CreateClaim creates the IPAddressClaim namespace/name of the fleet's
// pool, and its namespace if it is not there.
func (f *Fleet) CreateClaim(ctx context.Context, namespace, name string) {
	f.T.Helper()
	err := f.K.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		f.T.Fatalf("create namespace %s: %v", namespace, err)
	}
	u := capi.NewClaim(ClaimVersion)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": f.Pool}}
	if err := f.K.Create(ctx, u); err != nil {
		f.T.Fatalf("create claim %s/%s: %v", namespace, name, err)
	}
}

// Claimed waits until every claim of names in namespace is Ready, and
// its status names an IPAddress of the fleet's pool that the claim
// controls and that holds one address no other claim of names holds,
// and the pool agrees with its holders' records (Check); it returns each
// claim's address.
func (f *Fleet) Claimed(ctx context.Context, when, namespace string, names []string) map[string]string {
	f.T.Helper()
	var got map[string]string
	f.Eventually(when, func() error {
		got = map[string]string{}
		for _, name := range names {
			ip, err := f.claimed(ctx, namespace, name)
			if err != nil {
				return err
			}
			got[name] = ip
		}
		return f.Check(ctx)
	})
	f.onceEach(when, got)
	return got
}

// claimed returns the address of the claim namespace/name once it is
// served, or says why it is not.
func (f *Fleet) claimed(ctx context.Context, namespace, name string) (string, error) {
	claim := capi.NewClaim(ClaimVersion)
	if err := f.K.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, claim); err != nil {
		return "", err
	}
	var status struct {
		AddressRef struct {
			Name string `json:"name"`
		} `json:"addressRef"`
		Conditions []metav1.Condition `json:"conditions"`
	}
	raw, _, _ := unstructured.NestedMap(claim.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status); err != nil {
		return "", fmt.Errorf("claim %s/%s: status: %w", namespace, name, err)
	}
	if c := meta.FindStatusCondition(status.Conditions, capi.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		return "", fmt.Errorf("claim %s/%s is not Ready: %+v", namespace, name, status.Conditions)
	}
	if status.AddressRef.Name == "" {
		return "", fmt.Errorf("claim %s/%s names no IPAddress", namespace, name)
	}
	u := capi.NewAddress(ClaimVersion)
	if err := f.K.Get(ctx, client.ObjectKey{Namespace: namespace, Name: status.AddressRef.Name}, u); err != nil {
		return "", fmt.Errorf("claim %s/%s: its IPAddress: %w", namespace, name, err)
	}
	a := capi.AddressOf(u)
	switch {
	case a.Terminating:
		return "", fmt.Errorf("IPAddress %s/%s is being deleted", namespace, a.Name)
	case a.Pool.Name != f.Pool || a.Claim != name || !a.IP.IsValid():
		return "", fmt.Errorf("IPAddress %s/%s names pool %q, claim %q, address %v", namespace, a.Name, a.Pool.Name, a.Claim, a.IP)
	case capi.ControllerClaimUID(u) != claim.GetUID():
		return "", errors.New("IPAddress " + namespace + "/" + a.Name + " is not controlled by its claim (not adopted yet?)")
	}
	return a.IP.String(), nil
}
