package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// warnedClient returns a client of the local cluster whose warnings w
// collects.
func warnedClient() (client.Client, *envtest.Warnings) {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	Expect(err).NotTo(HaveOccurred())
	s, err := scheme.New()
	Expect(err).NotTo(HaveOccurred())
	c, w, err := envtest.WarnedClient(cfg, client.Options{Scheme: s})
	Expect(err).NotTo(HaveOccurred())
	return c, w
}

// editRange changes a pool's range through c, as kubectl edit would, and
// as kubectl does, reads the pool again when its status changed in between:
// the pool controller writes it whenever an enactment changes.
func editRange(c client.Client, name string, change func(*ippoolv1.IPRange), opts ...client.UpdateOption) error {
	return editPool(c, name, func(p *ippoolv1.NodeIPPool) { change(&p.Spec.Range) }, opts...)
}

// editPool changes a pool's spec through c; see editRange.
func editPool(c client.Client, name string, change func(*ippoolv1.NodeIPPool), opts ...client.UpdateOption) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		change(&p)
		return c.Update(ctx, &p, opts...)
	})
}

// printed returns the columns `kubectl get nip NAME` prints: the API
// server's table of the CRD's printer columns.
func printed(name string) map[string]any {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	Expect(err).NotTo(HaveOccurred())
	hc, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/apis/nmstate.io/v1/nodeippools/"+name, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	var table metav1.Table
	Expect(json.NewDecoder(resp.Body).Decode(&table)).To(Succeed())
	Expect(table.Rows).To(HaveLen(1))
	out := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		out[c.Name] = table.Rows[0].Cells[i]
	}
	return out
}

var _ = Describe("Gateway, DNS and reservations (deploy/samples/routed)", func() {
	It("hands the reserved address to its node, never the gateway, and routes and resolves with the pool's settings", func() {
		applySample("routed/nodeippool.yaml", &ippoolv1.NodeIPPool{})
		applySample("routed/nncp.yaml", &nmstatev1.NodeNetworkConfigurationPolicy{})
		policyAvailable("static-ip-routed")
		got := addresses("static-ip-routed", "traffic-2", "eth2", workers...)
		Expect(got["node02"]).To(Equal("10.20.20.50"), "reserved for node02")
		Expect(envtest.Distinct(got)).To(HaveLen(3))
		for node, ip := range got {
			Expect(ip).NotTo(Equal("10.20.20.1"), "the gateway is never handed out")
			e := enactment(node, "static-ip-routed")
			a, ok := capture.ParseState(e.Status.CapturedStates["addr"].State.Raw)
			Expect(ok).To(BeTrue())
			Expect([]any{a.Gateway.String(), a.DNSServers[0].String(), a.DNSSearch}).To(Equal([]any{"10.20.20.1", "10.20.20.53", []string{"traffic.example"}}))
			Eventually(func() []string { return routedBy(node, "eth2") }).Should(Equal([]string{"10.99.0.0/16 via 10.20.20.1 on eth2",
				"dns [10.20.20.53] search [traffic.example]"}), node)
		}
		Eventually(poolCondition("traffic-2", ippoolv1.ConditionReservationsHonored)).Should(Equal("True ReservationsHonored"))

		By("kubectl get nip showing the effective range and size")
		Expect(printed("traffic-2")).To(And(HaveKeyWithValue("Start", "10.20.20.10"), HaveKeyWithValue("End", "10.20.20.50"),
			HaveKeyWithValue("Size", BeNumerically("==", 41)), HaveKeyWithValue("Allocated", BeNumerically("==", 3))))

		By("refusing a reservation the range does not hand out")
		err := editPool(k, "traffic-2", func(p *ippoolv1.NodeIPPool) {
			p.Spec.Reservations = append(p.Spec.Reservations, ippoolv1.Reservation{IP: "10.20.20.1", Node: "node03"})
		})
		Expect(err).To(MatchError(ContainSubstring(`spec.reservations[10.20.20.1].ip: Invalid value: "10.20.20.1": cannot be handed out: it is the gateway`)))
	})

	It("shows defaulted start and end in kubectl get nip", func() {
		createPool("defaults", ippoolv1.IPRange{CIDR: "10.47.0.0/28"})
		Eventually(poolAvailable("defaults")).Should(Equal("True ReconciledPool"))
		Expect(printed("defaults")).To(And(HaveKeyWithValue("Start", "10.47.0.1"), HaveKeyWithValue("End", "10.47.0.14"),
			HaveKeyWithValue("Size", BeNumerically("==", 14))))
	})
})

var _ = Describe("Growing a pool in place", func() {
	It("lets a full pool grow, plans and dry-runs changes, refuses one that takes an address, and keeps every address when the start moves", func() {
		wc, warnings := warnedClient()
		createPool("grow", ippoolv1.IPRange{CIDR: "10.46.0.0/24", Start: "10.46.0.10", End: "10.46.0.11"})
		createPolicy("grow", "grow")
		var waiting string
		Eventually(func() string {
			for _, node := range workers {
				if c := trueCondition(node, "grow")(); strings.HasPrefix(c, "Failing IPPoolExhausted") {
					waiting = node
				}
			}
			return waiting
		}).ShouldNot(BeEmpty())

		By("metrics: the waiting node and the full pool, and every series the alerting rules read, for this pool")
		// The pool says it is exhausted in a reconcile of its own, which
		// may come after the handler reported its wait.
		Eventually(poolMetric("nmstate_ippool_waiting_holders", "grow")).Should(Equal(1.0))
		Eventually(poolMetric("nmstate_ippool_free_addresses", "grow")).Should(Equal(0.0))
		Eventually(poolMetric("nmstate_ippool_status_condition", "grow", "type=Available", "reason=ExhaustedIPPool")).Should(Equal(1.0))
		rules, err := deploy.AlertRules()
		Expect(err).NotTo(HaveOccurred())
		exported, err := controllerMetrics()
		Expect(err).NotTo(HaveOccurred())
		for _, r := range rules {
			for _, s := range r.Series() {
				if strings.HasPrefix(s, "nmstate_ippool_") {
					Expect(poolMetric(s, "grow")()).To(BeNumerically(">=", 0), "%s reads %s, which the pool controller does not export for the pool", r.Alert, s)
				} else {
					Expect(exported).To(HaveKey(s), "%s reads %s, which the pool controller does not export", r.Alert, s)
				}
			}
		}

		By("planning a larger end with kubectl nodeippool plan")
		proposed := filepath.Join(GinkgoT().TempDir(), "grow.yaml")
		Expect(os.WriteFile(proposed, []byte("apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: grow}\n"+
			"spec:\n  range: {cidr: 10.46.0.0/24, start: 10.46.0.10, end: 10.46.0.20}\n"), 0o600)).To(Succeed())
		out, err := plugin("plan", "-f", proposed)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(And(ContainSubstring("kubectl apply changes it in place"),
			ContainSubstring("2 holder(s) keep their address, 0 move to another, 0 find none; 9 of 11 addresses stay free")))

		By("a server-side dry run, which warns with the same plan and changes nothing")
		Expect(editRange(wc, "grow", func(r *ippoolv1.IPRange) { r.End = "10.46.0.20" }, client.DryRunAll)).To(Succeed())
		Expect(warnings.Take()).To(ContainSubstring("2 holder(s) keep their address"))
		Expect(trueCondition(waiting, "grow")()).To(HavePrefix("Failing IPPoolExhausted"))

		By("growing the end: the waiting node gets an address")
		Expect(editRange(wc, "grow", func(r *ippoolv1.IPRange) { r.End = "10.46.0.20" })).To(Succeed())
		before := addresses("grow", "grow", "eth1", workers...)
		Expect(before[waiting]).To(Equal("10.46.0.12"))
		Eventually(poolMetric("nmstate_ippool_waiting_holders", "grow")).Should(Equal(0.0))

		By("refusing an exclude over a held address, naming the node")
		holder := workers[0]
		err = editRange(k, "grow", func(r *ippoolv1.IPRange) { r.Exclude = []string{before[holder]} })
		Expect(err).To(MatchError(And(ContainSubstring(`admission webhook "range.nodeippools.nmstate.io" denied the request`),
			ContainSubstring(before[holder]+" held by node "+holder))))
		out, _ = plugin("plan", "-f", writeProposed("10.46.0.10", "10.46.0.20", before[holder]))
		Expect(out).To(And(ContainSubstring("kubectl apply would be refused"), ContainSubstring("move: excluded from the proposed range")))

		By("moving the start earlier: the pool is rebuilt and every node keeps its address")
		Expect(editRange(wc, "grow", func(r *ippoolv1.IPRange) { r.Start = "10.46.0.2" })).To(Succeed())
		Expect(warnings.Take()).To(ContainSubstring("the start moves, so every offset moves"))
		Eventually(func() []string { return events("NodeIPPool", "grow") }).Should(ContainElement(HavePrefix("RangeChanged: The range changed from 10.46.0.10-10.46.0.20 to 10.46.0.2-10.46.0.20")))
		Eventually(poolAvailable("grow")).Should(Equal("True ReconciledPool"))
		Expect(addresses("grow", "grow", "eth1", workers...)).To(Equal(before))
		Expect(printed("grow")).To(And(HaveKeyWithValue("Start", "10.46.0.2"), HaveKeyWithValue("Size", BeNumerically("==", 19))))
	})
})

// routedBy returns the routes a node's NodeNetworkState configures through
// iface, as "DESTINATION via NEXT-HOP on INTERFACE", and its name
// resolution, as "dns [SERVERS] search [DOMAINS]". Specs share nodes, so
// routes through other interfaces are left out.
func routedBy(node, iface string) []string {
	var nns nncev1beta1.NodeNetworkState
	if err := k.Get(ctx, types.NamespacedName{Name: node}, &nns); err != nil {
		return []string{err.Error()}
	}
	var state struct {
		Routes struct {
			Config []struct {
				Destination string `json:"destination"`
				NextHop     string `json:"next-hop-address"`
				Interface   string `json:"next-hop-interface"`
			} `json:"config"`
		} `json:"routes"`
		DNS struct {
			Config struct {
				Server []string `json:"server"`
				Search []string `json:"search"`
			} `json:"config"`
		} `json:"dns-resolver"`
	}
	if err := yaml.Unmarshal(nns.Status.CurrentState.Raw, &state); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, r := range state.Routes.Config {
		if r.Interface != iface {
			continue
		}
		out = append(out, fmt.Sprintf("%s via %s on %s", r.Destination, r.NextHop, r.Interface))
	}
	return append(out, fmt.Sprintf("dns %v search %v", state.DNS.Config.Server, state.DNS.Config.Search))
}

// writeProposed writes a proposed "grow" pool for plan -f.
func writeProposed(start, end string, exclude ...string) string {
	GinkgoHelper()
	p := ippoolv1.NodeIPPool{TypeMeta: metav1.TypeMeta{APIVersion: "nmstate.io/v1", Kind: "NodeIPPool"}, ObjectMeta: metav1.ObjectMeta{Name: "grow"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.46.0.0/24", Start: start, End: end, Exclude: exclude}}}
	raw, err := json.Marshal(p)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "proposed.json")
	Expect(os.WriteFile(path, raw, 0o600)).To(Succeed())
	return path
}
