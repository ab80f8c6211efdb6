// Package admissionpolicies installs companion mode's admission boundary
// from the pool controller itself, for an install that cannot carry it: an
// OLM bundle (registry+v1) has no place for ValidatingAdmissionPolicies, and
// names the pool controller's service account only once it is installed in
// a namespace of the admin's choosing.
//
// The Installer applies (server-side) the policies and bindings that
// deploy/companion installs (deploy.CompanionAdmissionPolicies), and the
// two ClusterRoleBindings labelled nmstate.io/ippool-identity that they
// take as their parameter — allocation-writers and pool-controller — with
// the pool controller's own service account as their subject and the
// install's ClusterRole (Owner) as their role. Every object it applies is
// owned by that ClusterRole, so that removing the install removes them
// (Kubernetes' garbage collector).
//
// The pool controller is not ready until they are applied: an install that
// admits writes of allocation state by anyone is not an install to trust.
// It applies them again every Interval, so that a policy deleted by hand
// comes back.
package admissionpolicies

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// FieldOwner is the field manager of everything the Installer applies.
const FieldOwner = "nmstate-ippool-pool-controller"

// IdentityLabel labels the ClusterRoleBindings whose subjects the
// admission policies take as who is who.
const IdentityLabel = "nmstate.io/ippool-identity"

// The identity bindings: their label value and name, as deploy/rbac
// names them.
var identities = []struct{ identity, name string }{
	{"allocation-writers", "nmstate-ippool-allocation-writers"},
	{"pool-controller", "nmstate-ippool-pool-controller"},
}

// DefaultInterval is how often the Installer applies the objects again.
const DefaultInterval = 10 * time.Minute

// Installer applies the admission policies and the identity bindings. It
// is a manager Runnable that every replica runs (no leader election: each
// replica's readiness waits for it).
type Installer struct {
	// Client writes to the API server directly (no cache).
	Client client.Client
	// Owner is the name of the install's ClusterRole: the role of the
	// identity bindings and the owner of every object applied.
	Owner string
	// Subject is the pool controller's service account (ServiceAccount
	// parses it from the name the API server knows it by).
	Subject rbacv1.Subject
	// Policies are the policies and their bindings to apply.
	Policies []*unstructured.Unstructured
	// Interval is how often to apply them again; 0 is DefaultInterval.
	Interval time.Duration

	installed atomic.Bool
}

// ServiceAccount returns the subject of a service account's user name,
// system:serviceaccount:NAMESPACE:NAME.
func ServiceAccount(username string) (rbacv1.Subject, error) {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return rbacv1.Subject{}, fmt.Errorf("the pool controller runs as %q, not as a service account: "+
			"the admission policies name their writers by service account (run it in a pod, or install the policies with deploy/companion)", username)
	}
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: parts[2], Name: parts[3]}, nil
}

// Install applies every object once.
func (i *Installer) Install(ctx context.Context) error {
	var role rbacv1.ClusterRole
	if err := i.Client.Get(ctx, client.ObjectKey{Name: i.Owner}, &role); err != nil {
		return fmt.Errorf("read ClusterRole %s, the install's role that the identity bindings bind and that owns the admission policies: %w", i.Owner, err)
	}
	owner := metav1.OwnerReference{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole", Name: role.Name, UID: role.UID}
	objs, err := i.bindings()
	if err != nil {
		return err
	}
	for _, p := range i.Policies {
		objs = append(objs, p.DeepCopy())
	}
	for _, obj := range objs {
		obj.SetOwnerReferences([]metav1.OwnerReference{owner})
		obj.SetResourceVersion("")
		if err := i.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// bindings returns the identity bindings as objects to apply.
func (i *Installer) bindings() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, id := range identities {
		b := &rbacv1.ClusterRoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: id.name, Labels: map[string]string{
				IdentityLabel: id.identity, "app.kubernetes.io/part-of": "nmstate-ippool"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: i.Owner},
			Subjects: []rbacv1.Subject{i.Subject},
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: u})
	}
	return out, nil
}

// Start applies the objects until it succeeds, then again every
// Interval, until ctx ends.
func (i *Installer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("admission-policies")
	interval := i.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		err := i.Install(ctx)
		if err == nil {
			break
		}
		log.Error(err, "installing the admission policies; the pool controller is not ready until they are installed")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	i.installed.Store(true)
	log.Info("installed the admission policies and the identity bindings", "owner", i.Owner,
		"subject", i.Subject.Namespace+"/"+i.Subject.Name, "policies", len(i.Policies))
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := i.Install(ctx); err != nil {
				log.Error(err, "applying the admission policies again")
			}
		}
	}
}

// NeedLeaderElection is false: every replica installs, and is ready only
// once it has.
func (i *Installer) NeedLeaderElection() bool { return false }

// Checker is a readiness check: ready once the objects are installed.
func (i *Installer) Checker(*http.Request) error {
	if !i.installed.Load() {
		return errors.New("the admission policies are not installed yet (see the log)")
	}
	return nil
}
