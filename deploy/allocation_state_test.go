package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// upstreamHandler is the service account a test gives kubernetes-nmstate's
// handler, as its operator names it.
var upstreamHandler = account{Namespace: "nmstate", Name: "nmstate-handler"}

// TestAllocationStateOnlyByThePoolController installs deploy/companion's
// RBAC and admission policies (the mode in which kubernetes-nmstate's
// handler runs beside our pool controller) on a real API server with
// Cluster API's IPAM CRDs, binds kubernetes-nmstate's handler ClusterRole
// (nmstate.io/* with every verb, ../shared/peers) to that handler's
// service account, and acts with a pod-bound token of it: every write of
// allocation state — a pool's status, a pooled policy's records, an
// IPAddress from a pool — is refused and changes nothing, while its own
// writes (enactments, NodeNetworkStates) pass. A tenant with every right
// in its namespace cannot make or move an IPAddress from a pool (to name a
// node's address). The pool controller's token makes each of the refused
// writes, and so may a cluster admin, who could remove the policy anyway
// (a backup restored).
func TestAllocationStateOnlyByThePoolController(t *testing.T) {
	role := upstreamHandlerRole(t)
	env, err := envtest.Start(envtest.WithClusterAPI())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	installAccessControl(ctx, t, admin, "companion")
	controller := account{Namespace: "nmstate-ippool", Name: "nmstate-ippool-pool-controller"}

	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upstreamHandler.Namespace}}))
	must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: upstreamHandler.Name, Namespace: upstreamHandler.Namespace}}))
	must(t, admin.Create(ctx, role))
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: upstreamHandler.Name, Namespace: upstreamHandler.Namespace}}}))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	must(t, admin.Create(ctx, node))
	asUpstream := tokenClient(t, env, podToken(ctx, t, env.Config, admin, upstreamHandler, node))
	asController := tokenClient(t, env, podToken(ctx, t, env.Config, admin, controller, node))

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "traffic-1"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
	must(t, admin.Create(ctx, pool))
	pooled := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "static-ip"},
		Spec: shared.NodeNetworkConfigurationPolicySpec{DesiredState: shared.NewState("interfaces: []")}}
	must(t, admin.Create(ctx, pooled))
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}))

	awaitAllocationStateGuarded(ctx, t, admin, asUpstream, pool)

	// The pool controller writes each; the records it leaves are what the
	// attacks then try to change.
	p := fetch(ctx, t, admin, pool)
	p.Status.AllocatedOffsets = "recorded-by-the-controller"
	must(t, asController.Status().Update(ctx, p))
	pp := fetch(ctx, t, admin, pooled)
	pp.Status.Nodes = []ippoolv1.PooledPolicyNode{{Node: "w1", Policy: "static-ip-w1", Addresses: []ippoolv1.PooledAddress{{Capture: "addr", Pool: pool.Name, IP: "10.0.0.2"}}}}
	must(t, asController.Status().Update(ctx, pp))
	address := ipAddress("tenant", "w1-addr", pool.Name, "10.0.0.2")
	must(t, asController.Create(ctx, address.DeepCopy()))
	stored := fetch(ctx, t, admin, address)
	must(t, unstructured.SetNestedField(stored.Object, "10.0.0.3", "spec", "address"))
	must(t, asController.Update(ctx, stored))

	// A tenant with every right in its namespace, as a namespace admin.
	tenant := account{Namespace: "tenant", Name: "tenant-admin"}
	must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tenant.Name, Namespace: tenant.Namespace}}))
	must(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: tenant.Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}))
	must(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "everything", Namespace: tenant.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: tenant.Name, Namespace: tenant.Namespace}}}))
	asTenant := tokenClient(t, env, podToken(ctx, t, env.Config, admin, tenant, node))

	// Who tries each write: the identities whose RBAC allows it.
	upstream := map[string]client.Client{upstreamHandler.user(): asUpstream}
	tenants := map[string]client.Client{tenant.user(): asTenant}
	for _, tt := range []struct {
		name   string
		who    map[string]client.Client
		do     func(client.Client) error
		target client.Object
		says   string
	}{
		{"clear a pool's bitmap", upstream, func(c client.Client) error {
			p := fetch(ctx, t, admin, pool)
			p.Status.AllocatedOffsets, p.Status.Quarantined = "", nil
			return c.Status().Update(ctx, p)
		}, pool, "may not change the status of NodeIPPool traffic-1: allocation state is written only by the pool controller"},
		{"patch a pool's status", upstream, func(c client.Client) error {
			return c.Status().Patch(ctx, fetch(ctx, t, admin, pool), client.RawPatch(types.MergePatchType, []byte(`{"status":{"allocatedOffsets":null}}`)))
		}, pool, "may not change the status of NodeIPPool traffic-1"},
		{"drop a pooled policy's records", upstream, func(c client.Client) error {
			pp := fetch(ctx, t, admin, pooled)
			pp.Status.Nodes = nil
			return c.Status().Update(ctx, pp)
		}, pooled, "may not change the status of PooledNodeNetworkConfigurationPolicy static-ip"},
		{"make an IPAddress from a pool, naming a node's address", tenants, func(c client.Client) error {
			return c.Create(ctx, ipAddress("tenant", "forged", pool.Name, "10.0.0.9"))
		}, nil, "may not change IPAddress tenant/forged of NodeIPPool traffic-1"},
		{"move an IPAddress to another address", tenants, func(c client.Client) error {
			a := fetch(ctx, t, admin, address)
			_ = unstructured.SetNestedField(a.Object, "10.0.0.7", "spec", "address")
			return c.Update(ctx, a)
		}, address, "may not change IPAddress tenant/w1-addr of NodeIPPool traffic-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for who, c := range tt.who {
				before := version(ctx, t, admin, tt.target)
				err := tt.do(c)
				switch {
				case err == nil:
					t.Errorf("%s could %s", who, tt.name)
				case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
					t.Errorf("%s: refused with %v, want Forbidden", who, err)
				case !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), who+" may not change"):
					t.Errorf("%s: the refusal says\n  %v\nwant it to say\n  %s", who, err, tt.says)
				}
				if after := version(ctx, t, admin, tt.target); after != before {
					t.Errorf("%s: %s changed although the request was refused", who, tt.target.GetName())
				}
			}
		})
	}

	t.Run("kubernetes-nmstate's handler writes no other node's evidence", func(t *testing.T) {
		other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}
		must(t, admin.Create(ctx, other))
		e := envtest.EnactmentOf(other, "static-ip-w2")
		must(t, admin.Create(ctx, e))
		s := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: other.Name}}
		must(t, admin.Create(ctx, s))
		on := "node w1's credentials may change only "
		for _, attack := range []struct {
			name, says string
			do         func(client.Client) error
		}{
			{"forge another node's state without its addresses", on + "NodeNetworkState w1, not NodeNetworkState w2 (status)", func(c client.Client) error {
				s := fetch(ctx, t, admin, s)
				s.Status.CurrentState = shared.NewState("interfaces: []")
				s.Status.LastSuccessfulUpdateTime = metav1.Now()
				return c.Status().Update(ctx, s)
			}},
			{"mark another node's enactment Available", on + "its own enactments, not NodeNetworkConfigurationEnactment w2.static-ip-w2 (status) of node w2", func(c client.Client) error {
				e := fetch(ctx, t, admin, e)
				e.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationEnactmentConditionAvailable, Status: corev1.ConditionTrue}}
				return c.Status().Update(ctx, e)
			}},
			{"delete another node's enactment", on + "its own enactments, not NodeNetworkConfigurationEnactment w2.static-ip-w2 of node w2", func(c client.Client) error {
				return c.Delete(ctx, fetch(ctx, t, admin, e))
			}},
		} {
			before := version(ctx, t, admin, s) + version(ctx, t, admin, e)
			if err := attack.do(asUpstream); err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), attack.says) ||
				!strings.Contains(err.Error(), "("+upstreamHandler.user()+")") {
				t.Errorf("%s: %v, want Forbidden saying %q", attack.name, err, attack.says)
			}
			if after := version(ctx, t, admin, s) + version(ctx, t, admin, e); after != before {
				t.Errorf("%s: changed although refused", attack.name)
			}
		}
		// The pool controller, node-bound too, acts for every node.
		must(t, asController.Patch(ctx, fetch(ctx, t, admin, s), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"test":"x"}}}`))))
	})

	t.Run("kubernetes-nmstate's handler still writes its own objects", func(t *testing.T) {
		e := envtest.EnactmentOf(node, "static-ip-w1")
		must(t, asUpstream.Create(ctx, e))
		e.Status.DesiredState = shared.NewState("interfaces: []")
		must(t, asUpstream.Status().Update(ctx, e))
		s := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
		must(t, asUpstream.Create(ctx, s))
		s.Status.CurrentState = shared.NewState("interfaces: []")
		must(t, asUpstream.Status().Update(ctx, s))
	})

	t.Run("kubernetes-nmstate's handler changes no pool, pooled policy or policy", func(t *testing.T) {
		upstreamChangesNoSpec(ctx, t, admin, asUpstream, pool, pooled)
	})

	t.Run("deleting an IPAddress stays open (the garbage collector's and an admin's repair)", func(t *testing.T) {
		must(t, admin.Delete(ctx, fetch(ctx, t, admin, address)))
	})

	t.Run("who could remove the policy is not bound by it: a cluster admin restores an IPAddress from a backup", func(t *testing.T) {
		must(t, admin.Create(ctx, ipAddress("tenant", "restored", pool.Name, "10.0.0.4")))
	})
}

// upstreamChangesNoSpec runs the attacks of kubernetes-nmstate's handler
// (asUpstream, a subject of ClusterRoleBinding nmstate-handler) on what
// decides addresses beside allocation state: each is refused by the
// policy nmstate-ippool-upstream-handler and changes nothing, while its
// write of a policy's status passes.
func upstreamChangesNoSpec(ctx context.Context, t *testing.T, admin, asUpstream client.Client,
	pool *ippoolv1.NodeIPPool, pooled *ippoolv1.PooledNodeNetworkConfigurationPolicy) {
	t.Helper()
	nncp := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "static-ip-w1",
		Labels: map[string]string{ippoolv1.PooledPolicyLabel: pooled.Name}},
		Spec: shared.NodeNetworkConfigurationPolicySpec{DesiredState: shared.NewState("interfaces: []")}}
	must(t, admin.Create(ctx, nncp))
	// The API server loads a policy within a few seconds: until then a
	// harmless label goes through.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := asUpstream.Patch(ctx, fetch(ctx, t, admin, pool), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`)))
		if err != nil && strings.Contains(err.Error(), "nmstate-ippool-upstream-handler") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream-handler policy is not in force after a minute: %v", err)
		}
	}
	user := upstreamHandler.user()
	for _, attack := range []struct {
		name   string
		target client.Object
		says   string
		do     func(client.Client) error
	}{
		{"create a NodeIPPool", nil, "may not create NodeIPPool rogue:", func(c client.Client) error {
			return c.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "rogue"},
				Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}})
		}},
		{"change a pool's range", pool, "may not update NodeIPPool traffic-1:", func(c client.Client) error {
			p := fetch(ctx, t, admin, pool)
			p.Spec.Range.Exclude = append(p.Spec.Range.Exclude, "10.0.0.2")
			return c.Update(ctx, p)
		}},
		{"reset a pool", pool, "may not update NodeIPPool traffic-1:", func(c client.Client) error {
			return c.Patch(ctx, fetch(ctx, t, admin, pool), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"`+ippoolv1.ResetIPPoolAnnotation+`":"traffic-1"}}}`)))
		}},
		{"delete a pool", pool, "may not delete NodeIPPool traffic-1:", func(c client.Client) error {
			return c.Delete(ctx, fetch(ctx, t, admin, pool))
		}},
		{"change a pooled policy's state", pooled, "may not update PooledNodeNetworkConfigurationPolicy static-ip:", func(c client.Client) error {
			pp := fetch(ctx, t, admin, pooled)
			pp.Spec.DesiredState = shared.NewState("interfaces: [{name: eth1, type: ethernet, state: down}]")
			return c.Update(ctx, pp)
		}},
		{"delete a pooled policy", pooled, "may not delete PooledNodeNetworkConfigurationPolicy static-ip:", func(c client.Client) error {
			return c.Delete(ctx, fetch(ctx, t, admin, pooled))
		}},
		{"rewrite a generated policy", nncp, "may not update NodeNetworkConfigurationPolicy static-ip-w1:", func(c client.Client) error {
			p := fetch(ctx, t, admin, nncp)
			p.Spec.DesiredState = shared.NewState("interfaces: [{name: eth1, type: ethernet, state: up, ipv4: {enabled: true, address: [{ip: 10.0.0.9, prefix-length: 24}]}}]")
			return c.Update(ctx, p)
		}},
		{"delete a generated policy", nncp, "may not delete NodeNetworkConfigurationPolicy static-ip-w1:", func(c client.Client) error {
			return c.Delete(ctx, fetch(ctx, t, admin, nncp))
		}},
	} {
		before := version(ctx, t, admin, attack.target)
		err := attack.do(asUpstream)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), user+" "+attack.says) ||
			!strings.Contains(err.Error(), "a subject of ClusterRoleBinding nmstate-handler") {
			t.Errorf("%s: %v, want Forbidden saying %q", attack.name, err, user+" "+attack.says)
		}
		if after := version(ctx, t, admin, attack.target); after != before {
			t.Errorf("%s: changed although refused", attack.name)
		}
	}
	p := fetch(ctx, t, admin, nncp)
	p.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationPolicyConditionAvailable, Status: corev1.ConditionTrue}}
	must(t, asUpstream.Status().Update(ctx, p))
}

// upstreamHandlerRole reads kubernetes-nmstate's handler ClusterRole kept
// beside the project; the test is skipped without it.
func upstreamHandlerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "..", "shared", "peers", "upstream-handler-clusterrole.yaml"))
	if os.IsNotExist(err) {
		t.Skip("kubernetes-nmstate's handler ClusterRole is kept in ../shared/peers, which this checkout has not")
	}
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.UnmarshalStrict(raw, &role))
	return &role
}

// ipAddress is a Cluster API IPAddress of pool, as the provider makes one
// for a claim of its name.
func ipAddress(namespace, name, pool, ip string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"address": ip, "prefix": int64(24),
			"claimRef": map[string]any{"name": name},
			"poolRef":  map[string]any{"apiGroup": ippoolv1.GroupVersion.Group, "kind": "NodeIPPool", "name": pool}},
	}}
	return u
}

// fetch reads o again as the admin.
func fetch[T client.Object](ctx context.Context, t *testing.T, admin client.Client, o T) T {
	t.Helper()
	out := o.DeepCopyObject().(T)
	must(t, admin.Get(ctx, client.ObjectKeyFromObject(o), out))
	return out
}

// version is o's resourceVersion, "" for nil.
func version(ctx context.Context, t *testing.T, admin client.Client, o client.Object) string {
	t.Helper()
	if o == nil {
		return ""
	}
	return fetch(ctx, t, admin, o).GetResourceVersion()
}

// awaitAllocationStateGuarded waits until the API server enforces the
// allocation-state policy (it loads policies and their parameters within
// a few seconds): c's write of the pool's status is refused.
func awaitAllocationStateGuarded(ctx context.Context, t *testing.T, admin, c client.Client, pool *ippoolv1.NodeIPPool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := fetch(ctx, t, admin, pool)
		p.Status.ObservedGeneration++
		err := c.Status().Update(ctx, p)
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the allocation-state policy is not in force after a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
