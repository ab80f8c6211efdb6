package deploy_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/nmstate-ippool/nmstate-ippool/deploy"
)

// TestInstallShape pins what the install promises: the handler on every
// node with host networking and its node's name, the controller as two
// leader-elected replicas on the control plane, and RBAC that gives each
// component what it uses and no more.
func TestInstallShape(t *testing.T) {
	objs := render(t, "default")
	ds := typed[appsv1.DaemonSet](t, objs, "DaemonSet", "nmstate-ippool-handler")
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.ServiceAccountName != "nmstate-ippool-handler" {
		t.Errorf("handler: hostNetwork %v, service account %q", pod.HostNetwork, pod.ServiceAccountName)
	}
	env := pod.Containers[0].Env
	if len(env) == 0 || env[0].Name != "NODE_NAME" || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("handler: NODE_NAME does not come from spec.nodeName: %+v", env)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.Operator == corev1.TolerationOpExists && tol.Key == "" }) {
		t.Errorf("handler: does not tolerate every taint, so some nodes get no handler: %+v", pod.Tolerations)
	}

	dep := typed[appsv1.Deployment](t, objs, "Deployment", "nmstate-ippool-pool-controller")
	if *dep.Spec.Replicas != 2 || !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
		t.Errorf("controller: %d replicas, args %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Args)
	}
	if _, ok := dep.Spec.Template.Spec.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("controller: not scheduled on the control plane: %v", dep.Spec.Template.Spec.NodeSelector)
	}

	election := typed[rbacv1.Role](t, objs, "Role", "nmstate-ippool-leader-election")
	for _, r := range election.Rules {
		if !slices.Contains(r.Resources, "leases") {
			continue
		}
		if named := slices.Equal(r.ResourceNames, []string{deploy.PoolControllerLease}); !named && !slices.Equal(r.Verbs, []string{"create"}) {
			t.Errorf("leader election: %v on leases not narrowed to the pool controller's Lease %s (only create cannot be): %+v",
				r.Verbs, deploy.PoolControllerLease, r)
		}
	}

	handler := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", "nmstate-ippool-handler")
	controller := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", "nmstate-ippool-pool-controller")
	for _, tt := range []struct {
		role              *rbacv1.ClusterRole
		resource, verb    string
		allowed           bool
		whyNotOrWhyNeeded string
	}{
		{handler, "nodeippools/status", "update", false, "handlers only ask the pool controller; deploy/self-allocate grants it"},
		{handler, "nodenetworkstates/status", "update", true, "handlers publish their node's state"},
		{handler, "nodeippools", "update", false, "handlers never change a pool's spec or annotations"},
		{handler, "nodes", "update", false, "handlers only read nodes"},
		{handler, "leases", "create", false, "handlers do not elect a leader"},
		{controller, "nodenetworkconfigurationenactments", "delete", true, "scale down"},
		{controller, "nodenetworkconfigurationenactments", "create", false, "only handlers create enactments"},
		{controller, "nodenetworkconfigurationpolicies", "create", true, "companion mode: one policy per node of a pooled policy"},
		{controller, "nodenetworkconfigurationpolicies", "delete", true, "companion mode: a node's policy goes with its release"},
		{controller, "leases", "create", false, "leases are granted in its namespace only"},
		{controller, "nodenetworkstates", "list", true, "quarantines are lifted, and strays found, on the nodes' published states"},
		{controller, "nodenetworkstates/status", "update", false, "only handlers publish states"},
		{controller, "nodenetworkconfigurationenactments", "patch", true, "fencing an enactment before revoking its allocation"},
	} {
		if got := allows(tt.role, tt.resource, tt.verb); got != tt.allowed {
			t.Errorf("%s may %s %s: %v, want %v (%s)", tt.role.Name, tt.verb, tt.resource, got, tt.allowed, tt.whyNotOrWhyNeeded)
		}
	}
}

func allows(role *rbacv1.ClusterRole, resource, verb string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, resource) && (slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}
