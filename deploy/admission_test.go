package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// The two nodes: one's name is the other's plus a dotted suffix, so a
// check that compares a prefix instead of the whole name lets the first
// write the second's enactments.
const (
	nodeA = "w1"
	nodeB = "w1.rack2"
)

// TestHandlerCredentialsOwnNodeOnly installs the RBAC and admission
// policies of deploy/default, and of an admin's overlay that moves the
// install into another namespace under a name prefix, on a real API
// server each, and acts with the credentials the kubelet gives node A's
// handler pod: a service-account token bound to the pod, which carries A's
// name in its node claim. Every attack on node B's objects and on the
// pools is refused with a message naming A and the object, and changes
// nothing; A's own writes pass; a token without the claim changes nothing
// at all.
func TestHandlerCredentialsOwnNodeOnly(t *testing.T) {
	for _, dir := range []string{"default", "testdata/infra-net"} {
		t.Run(dir, func(t *testing.T) { handlerConfinedToOwnNode(t, dir) })
	}
}

func handlerConfinedToOwnNode(t *testing.T, dir string) {
	env, err := envtest.Start(envtest.WithWebhook())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	stopWebhook, err := env.StartWebhook()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopWebhook() })
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	handler := installAccessControl(ctx, t, admin, dir)

	nodes := map[string]*corev1.Node{}
	for _, name := range []string{nodeA, nodeB} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		must(t, admin.Create(ctx, n))
		nodes[name] = n
	}
	tokenA := podToken(ctx, t, env.Config, admin, handler, nodes[nodeA])
	asA := tokenClient(t, env, tokenA)
	if got := nodeClaim(ctx, t, env.Config, tokenA); got != nodeA {
		t.Fatalf("the pod-bound token's node claim is %q, want %q", got, nodeA)
	}

	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: shared.NodeNetworkConfigurationPolicySpec{DesiredState: shared.NewState("interfaces: []")}}
	must(t, admin.Create(ctx, policy))
	// B's objects, as B's handler and the pool controller left them.
	enactmentB := envtest.EnactmentOf(nodes[nodeB], "p")
	enactmentB.Finalizers = []string{ippoolv1.FinalizerIPPool}
	must(t, admin.Create(ctx, enactmentB))
	enactmentB.Status.IPPool = ippoolv1.EnactmentIPPools{"pool": {Allocated: []string{"10.0.0.2"}}}
	must(t, admin.Status().Update(ctx, enactmentB))
	stateB := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: nodeB}}
	must(t, admin.Create(ctx, stateB))
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
	must(t, admin.Create(ctx, pool))

	awaitPolicyInForce(ctx, t, admin, asA)

	attacker := envtest.Attacker{Node: nodeA, User: handler.user()}
	for _, attack := range envtest.Attacks(attacker, envtest.Victims{Enactment: enactmentB, State: stateB, Pool: pool, Policy: policy}) {
		t.Run(attack.Name, func(t *testing.T) {
			if err := attack.Try(ctx, admin, asA); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("own writes pass", func(t *testing.T) {
		e := envtest.EnactmentOf(nodes[nodeA], "p")
		must(t, asA.Create(ctx, e))
		e.Status.DesiredState = shared.NewState("interfaces: []")
		must(t, asA.Status().Update(ctx, e))
		e.Finalizers = []string{ippoolv1.FinalizerIPPool}
		must(t, asA.Update(ctx, e))
		e.Finalizers = nil
		must(t, asA.Update(ctx, e))
		must(t, asA.Delete(ctx, e))
		s := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}
		must(t, asA.Create(ctx, s))
		s.Status.CurrentState = shared.NewState("interfaces: []")
		must(t, asA.Status().Update(ctx, s))
		var pools ippoolv1.NodeIPPoolList
		must(t, asA.List(ctx, &pools))
		dotted := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rack.p"},
			Spec: shared.NodeNetworkConfigurationPolicySpec{DesiredState: shared.NewState("interfaces: []")}}
		must(t, admin.Create(ctx, dotted))
		must(t, asA.Create(ctx, envtest.EnactmentOf(nodes[nodeA], dotted.Name)))
	})

	t.Run("names that read several ways: only for a policy that exists and selects the node", func(t *testing.T) {
		asB := tokenClient(t, env, podToken(ctx, t, env.Config, admin, handler, nodes[nodeB]))
		// w1.rack2.z is also node w1's enactment of policy rack2.z.
		err := asB.Create(ctx, envtest.EnactmentOf(nodes[nodeB], "z"))
		if err == nil || !strings.Contains(err.Error(), `is refused: NodeNetworkConfigurationPolicy "z" does not exist`) {
			t.Errorf("node %s took w1.rack2.z for a policy that does not exist: %v", nodeB, err)
		}
		elsewhere := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rack.s"},
			Spec: shared.NodeNetworkConfigurationPolicySpec{NodeSelector: map[string]string{"rack": "s"},
				DesiredState: shared.NewState("interfaces: []")}}
		must(t, admin.Create(ctx, elsewhere))
		err = asA.Create(ctx, envtest.EnactmentOf(nodes[nodeA], elsewhere.Name))
		if err == nil || !strings.Contains(err.Error(), "the nodeSelector of NodeNetworkConfigurationPolicy rack.s does not select node w1") {
			t.Errorf("node %s made an enactment of a policy that does not select it: %v", nodeA, err)
		}
		// The name node A tried (w1.rack2.q) is node B's to take.
		q := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "q"},
			Spec: shared.NodeNetworkConfigurationPolicySpec{DesiredState: shared.NewState("interfaces: []")}}
		must(t, admin.Create(ctx, q))
		must(t, asB.Create(ctx, envtest.EnactmentOf(nodes[nodeB], "q")))
	})

	t.Run("a token without a node claim changes nothing", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(env.Config)
		must(t, err)
		tr, err := cs.CoreV1().ServiceAccounts(handler.Namespace).CreateToken(ctx, handler.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		must(t, err)
		unbound := tokenClient(t, env, tr.Status.Token)
		err = unbound.Create(ctx, envtest.EnactmentOf(nodes[nodeA], "r"))
		if err == nil || !strings.Contains(err.Error(), "carry no node claim") {
			t.Fatalf("a token without a node claim created an enactment, or was refused for another reason: %v", err)
		}
	})
}

// account is a service account of an install.
type account struct{ Namespace, Name string }

// user is the account's user name.
func (a account) user() string { return "system:serviceaccount:" + a.Namespace + ":" + a.Name }

// installAccessControl applies the namespaces, service accounts, RBAC and
// admission policies of an install (a directory of deploy/), for real, and
// returns the service account its handler DaemonSet runs as.
func installAccessControl(ctx context.Context, t *testing.T, c client.Client, dir string) account {
	t.Helper()
	wanted := map[string]bool{"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	n := 0
	var handler account
	for _, o := range render(t, dir) {
		if o.GetKind() == "DaemonSet" {
			sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
			handler = account{Namespace: o.GetNamespace(), Name: sa}
		}
		if !wanted[o.GetKind()] {
			continue
		}
		n++
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("deploy-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if n < 6 {
		t.Fatalf("deploy/%s has only %d of the access-control objects", dir, n)
	}
	return handler
}

// podToken returns a token of service account sa bound to a pod on node,
// as the kubelet requests for the pod's projected service-account volume.
func podToken(ctx context.Context, t *testing.T, cfg *rest.Config, c client.Client, sa account, node *corev1.Node) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-", Namespace: sa.Namespace},
		Spec: corev1.PodSpec{NodeName: node.Name, ServiceAccountName: sa.Name,
			// As the pod security standard "restricted" asks, which an
			// install's namespace may enforce.
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: "image", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}},
	}
	must(t, c.Create(ctx, pod))
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// nodeClaim returns the node the API server finds in token.
func nodeClaim(ctx context.Context, t *testing.T, cfg *rest.Config, token string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(envtest.BearerConfig(cfg, token))
	must(t, err)
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	must(t, err)
	claim := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]
	if len(claim) != 1 {
		return ""
	}
	return claim[0]
}

// tokenClient returns a client that authenticates with token.
func tokenClient(t *testing.T, env *envtest.Env, token string) client.Client {
	t.Helper()
	c, err := client.New(envtest.BearerConfig(env.Config, token), client.Options{Scheme: env.Scheme})
	must(t, err)
	return c
}

// awaitPolicyInForce waits until the API server enforces the admission
// policy (it loads new policies within a few seconds): an enactment for
// a node that does not exist is refused.
func awaitPolicyInForce(ctx context.Context, t *testing.T, admin, c client.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		probe := envtest.EnactmentOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, "p")
		err := c.Create(ctx, probe)
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			return
		}
		if err == nil {
			must(t, admin.Delete(ctx, probe))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy is not in force after a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
