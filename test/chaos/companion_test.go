package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// pooled is companion mode's PooledNodeNetworkConfigurationPolicy in the
// companion run: an address of chaos-v4 on every worker, two nodes at a
// time.
const pooled = "chaos-pooled"

// TestChaosCompanion runs the chaos of TestChaos in companion mode: the
// pool controller beside kubernetes-nmstate's real handler, one pool
// serving a PooledNodeNetworkConfigurationPolicy and Cluster API claims
// together, with the ordinary actions that break companion mode when a
// rule does not hold for every holder: Nodes deleted while their machines
// run, machines stopped (NotReady), the pooled policy deleted in the
// background, in the foreground and orphaning its policies, resets and
// deletions by hand of a node's generated policy, claims and their IPAddresses deleted, and
// kill -9 of the pool controller, of kubernetes-nmstate's handler and of
// the API server. No address may ever be on two NICs, or on a NIC while a
// claim holds it; once the faults are undone, every worker carries the
// address the pooled policy records for it, every claim has its own, and
// the pool agrees with them.
func TestChaosCompanion(t *testing.T) {
	RegisterTestingT(t)
	SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	peer, err := envtest.PeerHandler()
	Expect(err).NotTo(HaveOccurred())
	if peer == "" {
		t.Skip("no kubernetes-nmstate source in ../shared/peers: its handler cannot be built")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("companion chaos seed %d (rerun with -chaos.seed %d), %d nodes, %s of faults", seed, seed, *companionNodes, *duration)
	c := start(t, seed, *companionNodes, false, "--handler", "upstream", "--companion", "--peer-handler", peer, "--node-grace-period", "10s")
	// A Node deleted while its machine runs goes once kubernetes-nmstate's
	// handler has applied its removal, which waits for a maxUnavailable
	// slot behind a rollout of the pooled policy created again: minutes
	// on a busy machine, not one.
	c.patience = 3 * time.Minute
	Expect(c.createPool(pool4, ippoolv1.IPRange{CIDR: "10.90.0.0/24"})).To(BeTrue())
	c.pooledOn = "eth1"
	Expect(c.k.Create(c.ctx, pooledPolicy(c.pooledOn))).To(Succeed())
	Expect(c.k.Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: claimsNamespace}})).To(Succeed())
	for range claims {
		Expect(c.createClaim()).To(BeTrue())
	}
	Eventually(c.pooledUnconverged, 3*time.Minute).Should(BeEmpty())

	s := c.sample()
	last := c.inject(seed, companionFaults)
	converged := poll(2*time.Minute, func() bool { return len(c.pooledUnconverged()) == 0 })
	duplicates, samples := s.stop()
	t.Logf("%d samples of every node's network", samples)
	Expect(duplicates).To(BeEmpty(), "an address was on two NICs at once (seed %d)", seed)
	Expect(converged).To(BeTrue(), "every worker carries its recorded address within two minutes once the faults are undone (seed %d): %v",
		seed, c.pooledUnconverged())
	t.Logf("converged %s after the last fault", time.Since(last).Round(time.Second))
	Eventually(c.claimsServed, time.Minute).Should(Succeed(), "every claim has its address once the faults are undone (seed %d)", seed)
	Eventually(c.check, grace+quarantine+time.Minute).Should(Succeed(), "the pool agrees with its holders, no leak (seed %d)", seed)
	Eventually(func() []string { return c.quarantined(pool4) }, time.Minute).Should(BeEmpty(), "every quarantine is lifted on evidence once every machine runs (seed %d)", seed)
}

// pooledPolicy is the pooled policy of both runs, on the interface iface:
// eth1 in companion mode, eth2 in handler mode, where the policy chaos
// has eth1.
func pooledPolicy(iface string) *ippoolv1.PooledNodeNetworkConfigurationPolicy {
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: pooled}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	p.Spec.Capture = map[string]string{"v4": "ippool." + pool4 + ".allocate"}
	p.Spec.DesiredState = shared.NewState(strings.Replace(v4OnlyState, "name: eth1", "name: "+iface, 1))
	two := intstr.FromInt32(2)
	p.Spec.MaxUnavailable = &two
	return p
}

var companionFaults = []fault{
	claimReplaced,
	addressDeleted,
	handlerKilled,
	controllerKilled,
	apiServerKilled,
	crashRemoved,
	orphaned,
	machineStopped,
	deselected,
	pooledReset,
	generatedDeleted,
	pooledReplaced,
}

// replacePooled deletes the pooled policy with a random propagation and
// creates it again once it is gone: its deletion waits until every
// node's address is off, which a stopped machine delays.
func (c *cluster) replacePooled(rng *rand.Rand) bool {
	if _, ok := c.undo["pooled/"]; ok {
		return false
	}
	propagation := anyPropagation(rng)
	old := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: pooled}}
	if err := c.k.Delete(c.ctx, old, client.PropagationPolicy(propagation)); err != nil {
		return false
	}
	c.target = string(propagation)
	return c.later("pooled/", time.Now(), func() bool {
		err := c.k.Get(c.ctx, client.ObjectKeyFromObject(old), old)
		return apierrors.IsNotFound(err) && c.k.Create(c.ctx, pooledPolicy(c.pooledOn)) == nil
	})
}

// pooledUnconverged describes every worker that the pooled policy does not
// record with one address carried by its network (alone, in companion
// mode), and the pooled policy's condition when not Available.
func (c *cluster) pooledUnconverged() map[string]string {
	out := map[string]string{}
	var p ippoolv1.PooledNodeNetworkConfigurationPolicy
	if err := c.k.Get(c.ctx, types.NamespacedName{Name: pooled}, &p); err != nil {
		return map[string]string{"": err.Error()}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status == corev1.ConditionTrue && cond.Type != "Available" {
			out[""] = string(cond.Type) + " " + string(cond.Reason) + ": " + cond.Message
		}
	}
	var list corev1.NodeList
	if err := c.k.List(c.ctx, &list); err != nil {
		return map[string]string{"": err.Error()}
	}
	var nodes []string
	for _, n := range list.Items {
		nodes = append(nodes, n.Name)
	}
	nets := c.networks(nodes)
	for _, n := range list.Items {
		if _, worker := n.Labels["node-role.kubernetes.io/worker"]; !worker || n.DeletionTimestamp != nil {
			continue
		}
		rec := p.Status.NodeOf(n.Name)
		var recorded []string
		if rec != nil {
			for _, a := range rec.Addresses {
				recorded = append(recorded, a.IP)
			}
		}
		alone := c.pooledOn == "eth1"
		if len(recorded) != 1 || !slices.Contains(nets[n.Name], recorded[0]) || alone && len(nets[n.Name]) != 1 {
			out[n.Name] = fmt.Sprintf("records %v, network %v", recorded, nets[n.Name])
		}
	}
	return out
}
