package deploy_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestSelfAllocateConfinedToOwnNode installs deploy/self-allocate's
// access control and its status webhook on a real API server, and runs
// node w1's self-allocating handler with a token bound to a pod on w1. The
// handler takes its address from a pool where node w2 holds, takes and
// has released addresses: its own write passes. With the same token, every
// write that is not w1's own — clear w2's bit, drop w2's entry, plant an
// entry for w2's enactment, lift w2's quarantine, take w2's address in an
// entry of its own (to withdraw it later), plant a quarantine on it, mark
// the pool unavailable — is refused, names what, and changes nothing.
func TestSelfAllocateConfinedToOwnNode(t *testing.T) {
	bin := t.TempDir()
	must(t, envtest.BuildCommands(bin, "nmstatectl-sim"))
	env, err := envtest.Start(envtest.WithWebhook(), envtest.WithSelfAllocateWebhook())
	must(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	stopWebhook, err := env.StartWebhook()
	must(t, err)
	t.Cleanup(func() { _ = stopWebhook() })
	ctx := context.Background()
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	handler := installAccessControl(ctx, t, admin, "self-allocate")
	stopPolicies, err := env.StartPolicyAndEnactmentControllers()
	must(t, err)
	t.Cleanup(func() { _ = stopPolicies() })

	w1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"role": "w1"}}}
	w2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}}
	must(t, admin.Create(ctx, w1))
	must(t, admin.Create(ctx, w2))
	// The policy first: the enactment controller deletes the enactment of
	// a policy that does not exist, w2's below included.
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	policy.Spec.NodeSelector = map[string]string{"role": "w1"}
	policy.Spec.Capture = map[string]string{"addr": "ippool.traffic.allocate"}
	policy.Spec.DesiredState = shared.NewState(envtest.OneAddressState)
	must(t, admin.Create(ctx, policy))
	theirs := envtest.EnactmentOf(w2, "p")
	must(t, admin.Create(ctx, theirs))
	theirs.Status.IPPool = ippoolv1.EnactmentIPPools{"traffic": {Allocated: []string{"10.0.0.2"}}}
	must(t, admin.Status().Update(ctx, theirs))

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "traffic"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.20"}}}
	must(t, admin.Create(ctx, pool))
	// The pool as the pool controller leaves it: w2 holds 10.0.0.2, takes
	// 10.0.0.3 and released 10.0.0.4; vouched for and Available.
	p := fetch(ctx, t, admin, pool)
	rng, err := poolstatus.Range(p)
	must(t, err)
	alloc := ippool.NewAllocator(rng)
	for _, s := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		must(t, alloc.AllocateIP(netip.MustParseAddr(s)))
	}
	poolstatus.Set(p, alloc)
	since := metav1.NewTime(time.Now().Truncate(time.Second))
	poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.3", Holder: theirs.Name, Token: "1", Since: since})
	poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.4", Node: w2.Name, Holder: theirs.Name, Since: since})
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue,
		Reason: ippoolv1.ReasonReconciledPool, Message: "The pool is up to date"})
	p.Status.Stamp = poolstatus.Stamp(p)
	err = admin.Status().Update(ctx, p)
	must(t, err)

	token := podToken(ctx, t, env.Config, admin, handler, w1)
	node := envtest.NewNode(w1.Name, t.TempDir(), bin+"/nmstatectl-sim")
	node.SelfAllocate, node.Config = true, envtest.BearerConfig(env.Config, token)
	must(t, node.Start(env))
	t.Cleanup(func() { _ = node.Stop() })

	t.Log("w1's handler takes its own address through the webhook")
	ours := envtest.EnactmentOf(w1, "p")
	deadline := time.Now().Add(time.Minute)
	for {
		e := ours.DeepCopy()
		err := admin.Get(ctx, client.ObjectKeyFromObject(ours), e)
		if got := e.Status.IPPool["traffic"].Allocated; err == nil && len(got) == 1 {
			if got[0] != "10.0.0.1" {
				t.Fatalf("w1 recorded %v, want 10.0.0.1, the one free address below those w2 holds", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("w1's handler recorded no address in a minute (%v): %+v", err, e.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}

	asW1 := tokenClient(t, env, token)
	says := handler.user() + " (node w1) may change in the status of NodeIPPool traffic only its own node's entries: "
	for _, attack := range []struct {
		name, says string
		change     func(*ippoolv1.NodeIPPool, *ippool.Allocator)
	}{
		{"clear w2's bit", "the bit of 10.0.0.2 is cleared, and node w1 withdraws no entry of its own for it",
			func(_ *ippoolv1.NodeIPPool, a *ippool.Allocator) { _ = a.ReleaseIP(netip.MustParseAddr("10.0.0.2")) }},
		{"drop w2's in-flight entry", "the in-flight entry of enactment w2.p for 10.0.0.3 is not node w1's",
			func(p *ippoolv1.NodeIPPool, a *ippool.Allocator) {
				poolstatus.RemoveInFlight(p, "10.0.0.3")
				_ = a.ReleaseIP(netip.MustParseAddr("10.0.0.3"))
			}},
		{"plant an entry for w2's enactment", "the in-flight entry of enactment w2.p for 10.0.0.5 is not node w1's",
			func(p *ippoolv1.NodeIPPool, a *ippool.Allocator) {
				poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.5", Holder: theirs.Name, Token: "2", Since: metav1.Now()})
				_ = a.AllocateIP(netip.MustParseAddr("10.0.0.5"))
			}},
		{"lift w2's quarantine", "the quarantine of 10.0.0.4 released by node w2 is not node w1's to lift or change",
			func(p *ippoolv1.NodeIPPool, a *ippool.Allocator) {
				poolstatus.RemoveQuarantine(p, "10.0.0.4")
				_ = a.ReleaseIP(netip.MustParseAddr("10.0.0.4"))
			}},
		{"take w2's address, to withdraw it later", "the in-flight entry of enactment w1.p takes 10.0.0.2, which is in use",
			func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) {
				poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.2", Holder: ours.Name, Token: "3", Since: metav1.Now()})
			}},
		{"plant a quarantine on w2's address", "the quarantine of 10.0.0.2 for node w1 is not node w1's release of its own address",
			func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) {
				poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Node: "w1", Holder: ours.Name, Since: metav1.Now()})
			}},
		{"mark the pool unavailable", "the conditions are the pool controller's",
			func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) {
				meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable,
					Status: metav1.ConditionFalse, Reason: ippoolv1.ReasonExhaustedIPPool, Message: "forged"})
			}},
	} {
		before := fetch(ctx, t, admin, pool)
		p := before.DeepCopy()
		alloc, err := poolstatus.Allocator(p)
		must(t, err)
		attack.change(p, alloc)
		poolstatus.Set(p, alloc)
		p.Status.Stamp = poolstatus.Stamp(p) // anyone can recompute it
		err = asW1.Status().Update(ctx, p)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), attack.says) {
			t.Errorf("%s: %v, want Forbidden saying %q and %q", attack.name, err, says, attack.says)
		}
		if after := fetch(ctx, t, admin, pool); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the pool changed although the write was refused", attack.name)
		}
	}
}
