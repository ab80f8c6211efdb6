package handler_test

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/test/dnsserver"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// probedNode is a node whose simulated network starts as state, whose
// handler runs only the given probes, polled every 100ms for up to 2s,
// and gives up on the first failure (no retries).
func probedNode(t *testing.T, prefix, state string, probes func(r *handler.Reconciler) []probe.Probe) *envtest.Node {
	t.Helper()
	nd := newNodes(t, prefix, 1, map[string]string{"role": prefix})[0]
	Expect(os.WriteFile(nd.State, []byte(state), 0o600)).To(Succeed())
	nd.Tune = func(r *handler.Reconciler) {
		r.Retry.Steps = 0
		r.Probes = probe.Set{Probes: probes(r), Interval: 100 * time.Millisecond, Timeout: 2 * time.Second}
	}
	return nd
}

// nodeNetwork is a node before any policy: eth0 up with a default route
// through gateway and nameserver dns, eth1 unconfigured.
func nodeNetwork(gateway, dns string) string {
	return `interfaces:
- {name: eth0, type: ethernet, state: up, ipv4: {enabled: true, dhcp: true, address: [{ip: 192.168.3.3, prefix-length: 16}]}}
- {name: eth1, type: ethernet, state: up}
routes:
  config: []
  running:
  - {destination: 0.0.0.0/0, next-hop-address: ` + gateway + `, next-hop-interface: eth0, table-id: 254}
dns-resolver:
  config: {}
  running: {server: [` + dns + `]}
`
}

// cutting is a policy's desired state that configures eth1 with a pool
// address and does one more thing that breaks the node.
func cutting(breaks string) string {
	return envtest.OneAddressState + breaks
}

func expectRolledBack(nd *envtest.Node, policy, probeName, saw string) {
	Eventually(enactmentState(nd.Name, policy)).Should(And(
		HavePrefix("Failing: error reconciling NodeNetworkConfigurationPolicy on node "+nd.Name+": rolled back: probe "+probeName+" failed: "),
		ContainSubstring(saw)))
	e, err := getEnactment(nd.Name, policy)
	Expect(err).NotTo(HaveOccurred())
	Expect(e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing).Reason).To(
		Equal(shared.NodeNetworkConfigurationEnactmentConditionFailedToConfigure))
	Expect(nd.Configured("eth1")).To(BeEmpty(), "the apply was rolled back")
	_, err = os.Stat(nd.State + ".checkpoint")
	Expect(os.IsNotExist(err)).To(BeTrue(), "no checkpoint is left")
}

// TestPingProbe: a policy that drops the default route fails the ping
// probe (the gateway answered before the apply) and is rolled back; the
// node keeps its route. A gateway that never answered is not probed.
func TestPingProbe(t *testing.T) {
	RegisterTestingT(t)
	if err := probe.ICMPPing(context.Background(), mustParse("127.0.0.1")); err != nil {
		t.Skipf("no ICMP socket on this machine: %v", err)
	}
	pings := func(r *handler.Reconciler) []probe.Probe {
		return []probe.Probe{probe.Ping(r.State.Show, probe.ICMPPing)}
	}
	nd := probedNode(t, "ping", nodeNetwork("127.0.0.1", "127.0.0.1"), pings)
	newPool(t, "ping-pool", ippoolv1.IPRange{CIDR: "10.91.0.0/24"}, true)
	newPolicy(t, "ping", map[string]string{"role": "ping"}, map[string]string{"addr": "ippool.ping-pool.allocate"},
		cutting("routes:\n  config:\n  - {destination: 0.0.0.0/0, state: absent}\n"))
	start(t, nd)
	expectRolledBack(nd, "ping", "ping", "no default route")
	gw, err := nd.Network.Show(context.Background())
	Expect(err).NotTo(HaveOccurred())
	Expect(probe.DefaultGateway(gw)).To(Equal(mustParse("127.0.0.1")))

	// TEST-NET-2 never answers: the probe is skipped, the same policy
	// applies.
	silent := probedNode(t, "pingsilent", nodeNetwork("198.51.100.7", "127.0.0.1"), pings)
	newPolicy(t, "pingsilent", map[string]string{"role": "pingsilent"}, map[string]string{"addr": "ippool.ping-pool.allocate"},
		cutting("routes:\n  config:\n  - {destination: 0.0.0.0/0, state: absent}\n"))
	start(t, silent)
	Eventually(enactmentState(silent.Name, "pingsilent")).Should(HavePrefix("Available"))
}

// TestDNSProbe: a policy that replaces the nameserver with one that does
// not answer fails the dns probe and is rolled back.
func TestDNSProbe(t *testing.T) {
	RegisterTestingT(t)
	srv, err := dnsserver.Start("127.0.0.1:0", probe.DefaultDNSHost)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = srv.Close() })
	nd := probedNode(t, "dns", nodeNetwork("198.51.100.7", "127.0.0.1"), func(r *handler.Reconciler) []probe.Probe {
		return []probe.Probe{probe.DNS(r.State.Show, probe.DefaultDNSHost, srv.Port())}
	})
	newPool(t, "dns-pool", ippoolv1.IPRange{CIDR: "10.92.0.0/24"}, true)
	newPolicy(t, "dns", map[string]string{"role": "dns"}, map[string]string{"addr": "ippool.dns-pool.allocate"},
		cutting("dns-resolver:\n  config:\n    server: [127.0.0.3]\n"))
	start(t, nd)
	expectRolledBack(nd, "dns", "dns", "127.0.0.3")
	raw, err := nd.Network.Show(context.Background())
	Expect(err).NotTo(HaveOccurred())
	Expect(probe.Nameservers(raw)).To(Equal([]netip.Addr{mustParse("127.0.0.1")}))
}

// TestAPIServerProbe: a policy that takes down eth0, the node's link to
// the API server, fails the api-server probe and is rolled back, which
// brings the link back.
func TestAPIServerProbe(t *testing.T) {
	RegisterTestingT(t)
	var link *envtest.Link
	nd := probedNode(t, "apiserver", nodeNetwork("198.51.100.7", "198.51.100.7"), func(*handler.Reconciler) []probe.Probe {
		reader, err := client.New(link.Config, client.Options{Scheme: cfg.Scheme})
		Expect(err).NotTo(HaveOccurred())
		return []probe.Probe{probe.APIServer(reader)}
	})
	var err error
	link, err = envtest.NewLink(nd, cfg.Config)
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = link.Close() })
	newPool(t, "apiserver-pool", ippoolv1.IPRange{CIDR: "10.93.0.0/24"}, true)
	newPolicy(t, "apiserver", map[string]string{"role": "apiserver"}, map[string]string{"addr": "ippool.apiserver-pool.allocate"},
		cutting("- {name: eth0, type: ethernet, state: down}\n"))
	start(t, nd)
	expectRolledBack(nd, "apiserver", "api-server", `get namespace "default"`)
	Expect(envtest.InterfaceState(nd, "eth0")).To(Equal("up"))
}

// TestNodeReadinessProbe: a node that is not Ready fails the
// node-readiness probe; once it is Ready and the policy changes, the
// policy applies.
func TestNodeReadinessProbe(t *testing.T) {
	RegisterTestingT(t)
	nd := probedNode(t, "ready", nodeNetwork("198.51.100.7", "198.51.100.7"), func(r *handler.Reconciler) []probe.Probe {
		return []probe.Probe{probe.NodeReadiness(r.APIReader, r.NodeName)}
	})
	setReady(nd.Name, corev1.ConditionFalse)
	newPool(t, "ready-pool", ippoolv1.IPRange{CIDR: "10.94.0.0/24"}, true)
	p := newPolicy(t, "ready", map[string]string{"role": "ready"}, map[string]string{"addr": "ippool.ready-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	expectRolledBack(nd, "ready", "node-readiness", "node "+nd.Name+" is not Ready (KubeletNotReady: simulated)")
	setReady(nd.Name, corev1.ConditionTrue)
	bumpPolicy(p.Name)
	Eventually(enactmentState(nd.Name, "ready")).Should(HavePrefix("Available"))
	Expect(nd.Configured("eth1")).NotTo(BeEmpty())
}

// TestStaleCheckpointRolledBack: a checkpoint left by a handler that died
// mid-apply is rolled back before the next apply, not committed with it.
func TestStaleCheckpointRolledBack(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "stale", 1, map[string]string{"role": "stale"})[0]
	Expect(nd.Network.Apply(context.Background(),
		[]byte("interfaces:\n- {name: eth2, type: ethernet, state: up, ipv4: {enabled: true, address: [{ip: 10.95.9.9, prefix-length: 24}]}}\n"))).To(Succeed())
	Expect(nd.Configured("eth2")).To(Equal("10.95.9.9/24"), "the crashed apply is live")
	newPool(t, "stale-pool", ippoolv1.IPRange{CIDR: "10.95.0.0/24"}, true)
	newPolicy(t, "stale", map[string]string{"role": "stale"}, map[string]string{"addr": "ippool.stale-pool.allocate"}, envtest.OneAddressState)
	start(t, nd)
	Eventually(enactmentState(nd.Name, "stale")).Should(HavePrefix("Available"))
	Expect(nd.Configured("eth2")).To(BeEmpty())
	Expect(nd.Configured("eth1")).To(Equal("10.95.0.1/24"))
}

// TestCheckpointRolledBackBeforePublishing: a handler restarted after it
// crashed between apply and commit rolls the checkpoint back before its
// state reporter publishes: the published state is the one nmstate would
// return to, never the uncommitted one. Otherwise a release the crashed
// apply was taking off would look done, and nmstate's own rollback would
// put the address back after the pool had handed it on.
func TestCheckpointRolledBackBeforePublishing(t *testing.T) {
	RegisterTestingT(t)
	nd := newNodes(t, "crashed", 1, map[string]string{"role": "crashed"})[0]
	Expect(nd.Network.Apply(context.Background(),
		[]byte("interfaces:\n- {name: eth2, type: ethernet, state: up, ipv4: {enabled: true, address: [{ip: 10.95.8.8, prefix-length: 24}]}}\n"))).To(Succeed())
	Expect(nd.Configured("eth2")).To(Equal("10.95.8.8/24"), "the crashed apply is live")
	start(t, nd)
	var nns nncev1beta1.NodeNetworkState
	Eventually(func() error { return k.Get(context.Background(), types.NamespacedName{Name: nd.Name}, &nns) }).Should(Succeed())
	Eventually(func() string {
		_ = k.Get(context.Background(), types.NamespacedName{Name: nd.Name}, &nns)
		return string(nns.Status.CurrentState.Raw)
	}).Should(ContainSubstring("eth2"))
	Expect(string(nns.Status.CurrentState.Raw)).NotTo(ContainSubstring("10.95.8.8"), "the uncommitted state was published")
	Expect(nd.Configured("eth2")).To(BeEmpty())
	_, err := os.Stat(nd.State + ".checkpoint")
	Expect(os.IsNotExist(err)).To(BeTrue(), "no checkpoint is left for nmstate to roll back later")
}

func setReady(node string, status corev1.ConditionStatus) {
	Eventually(func() error {
		var n corev1.Node
		if err := k.Get(context.Background(), types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		reason := "KubeletReady"
		if status != corev1.ConditionTrue {
			reason = "KubeletNotReady"
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason, Message: "simulated",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return k.Status().Update(context.Background(), &n)
	}).Should(Succeed())
}

func mustParse(ip string) netip.Addr { return netip.MustParseAddr(ip) }

// bumpPolicy changes the policy's spec (its maxUnavailable), so that its
// generation moves.
func bumpPolicy(name string) {
	Eventually(func() error {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := k.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		v := intstr.FromInt32(int32(p.Generation) + 1)
		p.Spec.MaxUnavailable = &v
		return k.Update(context.Background(), &p)
	}).Should(Succeed())
}
