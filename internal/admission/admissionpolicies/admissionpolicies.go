// Package admissionpolicies checks that companion mode's admission
// boundary is installed, for an install that cannot carry it: an OLM
// bundle (registry+v1) has no place for ValidatingAdmissionPolicies, and
// the policies' parameter — the ClusterRoleBindings labelled
// nmstate.io/ippool-identity that name the pool controller's service
// account — depends on the namespace the admin installs into. The admin
// applies them (deploy/olm/admission, docs/olm.md); the pool controller
// holds no right to write them, so that its credentials cannot weaken
// the boundary they are bound by.
//
// The Checker reads, every Interval, that each policy and binding
// deploy/companion installs exists, and that a ClusterRoleBinding of each
// identity names the pool controller's service account. The pool
// controller is ready only while they do: an install that admits writes
// of allocation state by anyone is not an install to trust.
package admissionpolicies

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// IdentityLabel labels the ClusterRoleBindings whose subjects the
// admission policies take as who is who.
const IdentityLabel = "nmstate.io/ippool-identity"

// Identities are the identities the companion policies read, each of
// which must name the pool controller.
var Identities = []string{"allocation-writers", "pool-controller"}

// DefaultInterval is how often the Checker reads.
const DefaultInterval = 30 * time.Second

// Checker checks the admission boundary. It is a manager Runnable that
// every replica runs (no leader election: each replica's readiness
// waits for it).
type Checker struct {
	// Reader reads from the API server directly (no cache).
	Reader client.Reader
	// Subject is the pool controller's service account (ServiceAccount
	// parses it from the name the API server knows it by).
	Subject rbacv1.Subject
	// Policies are the policies and bindings that must exist; only their
	// kinds and names are read.
	Policies []*unstructured.Unstructured
	// Interval is how often to check; 0 is DefaultInterval.
	Interval time.Duration
	// Hint says how to install what is missing.
	Hint string

	mu   sync.Mutex
	last error // the last check's finding; nil once one passed
	done bool  // a check has run
}

// ServiceAccount returns the subject of a service account's user name,
// system:serviceaccount:NAMESPACE:NAME.
func ServiceAccount(username string) (rbacv1.Subject, error) {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return rbacv1.Subject{}, fmt.Errorf("the pool controller runs as %q, not as a service account: "+
			"the admission policies name their writers by service account (run it in a pod)", username)
	}
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: parts[2], Name: parts[3]}, nil
}

// Check reads once, and returns what is missing as an error.
func (c *Checker) Check(ctx context.Context) error {
	var missing []string
	for _, p := range c.Policies {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(p.GroupVersionKind())
		err := c.Reader.Get(ctx, client.ObjectKey{Name: p.GetName()}, got)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, p.GetKind()+" "+p.GetName())
		case err != nil:
			return fmt.Errorf("read %s %s: %w", p.GetKind(), p.GetName(), err)
		}
	}
	for _, identity := range Identities {
		var bindings rbacv1.ClusterRoleBindingList
		if err := c.Reader.List(ctx, &bindings, client.MatchingLabels{IdentityLabel: identity}); err != nil {
			return fmt.Errorf("list the ClusterRoleBindings labelled %s=%s: %w", IdentityLabel, identity, err)
		}
		if !slices.ContainsFunc(bindings.Items, func(b rbacv1.ClusterRoleBinding) bool {
			return slices.Contains(b.Subjects, c.Subject)
		}) {
			missing = append(missing, fmt.Sprintf("a ClusterRoleBinding labelled %s=%s whose subjects name service account %s/%s",
				IdentityLabel, identity, c.Subject.Namespace, c.Subject.Name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("companion mode's admission boundary is not installed: missing %s; %s", strings.Join(missing, ", "), c.Hint)
	}
	return nil
}

// Start checks every Interval until ctx ends, and logs each change of
// the finding.
func (c *Checker) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("admission-policies")
	interval := c.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		err := c.Check(ctx)
		c.mu.Lock()
		changed := !c.done || (err == nil) != (c.last == nil)
		c.last, c.done = err, true
		c.mu.Unlock()
		if changed && err != nil {
			log.Error(err, "the pool controller is not ready until the admission boundary is installed")
		} else if changed {
			log.Info("companion mode's admission policies and identity bindings are installed", "policies", len(c.Policies),
				"subject", c.Subject.Namespace+"/"+c.Subject.Name)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// NeedLeaderElection is false: every replica checks, and is ready only
// while the boundary is installed.
func (c *Checker) NeedLeaderElection() bool { return false }

// Ready is a readiness check: ready while the last check passed.
func (c *Checker) Ready(*http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		return errors.New("the admission boundary has not been checked yet")
	}
	return c.last
}
