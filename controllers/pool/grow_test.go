package pool_test

import (
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// warned returns a client whose admission warnings w collects.
func warned(t *testing.T) (client.Client, *envtest.Warnings) {
	t.Helper()
	c, w, err := envtest.WarnedClient(env.Config, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c, w
}

// changeRange applies change to the pool's range, as `kubectl edit` would,
// and returns the API server's answer.
func changeRange(c client.Client, name string, change func(*ippoolv1.IPRange), opts ...client.UpdateOption) error {
	return changeSpec(c, name, func(s *ippoolv1.NodeIPPoolSpec) { change(&s.Range) }, opts...)
}

// changeSpec applies change to the pool's spec, as `kubectl edit` would,
// and returns the API server's answer: on the latest copy, again after a
// conflict, since the controller writes the pool's metadata too (its
// finalizer).
func changeSpec(c client.Client, name string, change func(*ippoolv1.NodeIPPoolSpec), opts ...client.UpdateOption) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err
		}
		change(&p.Spec)
		return c.Update(ctx, &p, opts...)
	})
}

// rangeOf returns the pool's spec.range as stored.
func rangeOf(name string) ippoolv1.IPRange {
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: name}, &p)).To(Succeed())
	return p.Spec.Range
}

// TestGrowInPlace: a full pool grows at its end and its waiting node gets
// an address; its start moves earlier, the pool is rebuilt and every node
// keeps its address at its new offset; excludes holding no address come
// and go. Changes that would take an address from a node, grow into
// another pool or change the CIDR are refused with a message that names
// the node and the address, and change nothing. A dry run says what a
// change does.
func TestGrowInPlace(t *testing.T) {
	RegisterTestingT(t)
	startController(t, nil)
	wc, w := warned(t)
	createPool(t, "grow", ippoolv1.IPRange{CIDR: "10.61.0.0/24", Start: "10.61.0.10", End: "10.61.0.12"})
	createPool(t, "grow-neighbour", ippoolv1.IPRange{CIDR: "10.61.0.0/24", Start: "10.61.0.100", End: "10.61.0.110"})
	Eventually(available("grow")).Should(HavePrefix("True"))

	// A new pool overlapping another is admitted with a warning, and the
	// controller refuses it.
	over := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "grow-over"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.61.0.0/24", Start: "10.61.0.105", End: "10.61.0.120"}}}
	Expect(wc.Create(ctx, over)).To(Succeed())
	Expect(w.Take()).To(Equal("NodeIPPool grow-over overlaps NodeIPPool grow-neighbour (10.61.0.100-10.61.0.110): " +
		"the pool controller refuses the newer of two overlapping pools (OverlappingIPPool)"))
	Eventually(available("grow-over")).Should(HavePrefix("False OverlappingIPPool"))
	deleteObject(over)

	createPolicy(t, "grow", "grow", "grow")
	nodes := newNodes(t, "grow", 4)
	var waiting string
	want := map[string]string{}
	Eventually(func() []string {
		var states []string
		for _, n := range nodes {
			state := enactmentState(n.Name + ".grow")()
			states = append(states, state)
			if strings.Contains(state, "is exhausted") {
				waiting = n.Name
			}
		}
		return states
	}).Should(ConsistOf(HavePrefix("Available"), HavePrefix("Available"), HavePrefix("Available"), ContainSubstring("is exhausted")))
	var holders []string
	for _, n := range nodes {
		if n.Name != waiting {
			want[n.Name] = held(n.Name+".grow", "grow")[0]
			holders = append(holders, n.Name)
		}
	}

	// Refused: an exclude over an address in use, an end before one, a
	// range reaching into the neighbour, another CIDR. Nothing changes.
	holder := holders[0]
	for _, tt := range []struct {
		name   string
		change func(*ippoolv1.IPRange)
		want   []string
	}{
		{"exclude", func(r *ippoolv1.IPRange) { r.Exclude = []string{want[holder]} }, []string{
			`admission webhook "range.nodeippools.nmstate.io" denied the request`, "spec.range: Forbidden: the change takes 1 address(es) in use",
			want[holder] + " held by node " + holder + " (policy grow, capture addr, interface eth1) would be excluded from the proposed range",
			"kubectl annotate nnce <enactment> nmstate.io/reset-ippool=grow"}},
		{"end", func(r *ippoolv1.IPRange) { r.End = "10.61.0.11" }, []string{"10.61.0.12 held by node", "would be outside the proposed range 10.61.0.10-10.61.0.11"}},
		{"overlap", func(r *ippoolv1.IPRange) { r.End = "10.61.0.100" }, []string{"would overlap NodeIPPool grow-neighbour (10.61.0.100-10.61.0.110)"}},
		{"cidr", func(r *ippoolv1.IPRange) { r.CIDR = "10.61.0.0/23" }, []string{"spec.range.cidr is immutable (10.61.0.0/24)"}},
	} {
		err := changeRange(k, "grow", tt.change)
		Expect(err).To(HaveOccurred(), tt.name)
		for _, s := range tt.want {
			Expect(err.Error()).To(ContainSubstring(s), tt.name)
		}
		Expect(rangeOf("grow")).To(Equal(ippoolv1.IPRange{CIDR: "10.61.0.0/24", Start: "10.61.0.10", End: "10.61.0.12"}), tt.name)
	}

	// A dry run of growing the end says what it does, and does nothing.
	Expect(changeRange(wc, "grow", func(r *ippoolv1.IPRange) { r.End = "10.61.0.20" }, client.DryRunAll)).To(Succeed())
	Expect(w.Take()).To(ContainSubstring("NodeIPPool grow: 3 holder(s) keep their address, 0 move to another, 0 find none; 8 of 11 addresses stay free"))
	Expect(rangeOf("grow").End).To(Equal("10.61.0.12"))

	// The end grows: the waiting node gets an address from the new part.
	Expect(changeRange(wc, "grow", func(r *ippoolv1.IPRange) { r.End = "10.61.0.20" })).To(Succeed())
	Expect(w.Take()).To(ContainSubstring("the range changes from 10.61.0.10-10.61.0.12 to 10.61.0.10-10.61.0.20"))
	Eventually(enactmentState(waiting + ".grow")).Should(HavePrefix("Available"))
	want[waiting] = held(waiting+".grow", "grow")[0]
	Expect(want[waiting]).To(Equal("10.61.0.13"))
	Eventually(available("grow")).Should(HavePrefix("True ReconciledPool"))
	assertIndexed("grow")

	// The start moves earlier: every offset moves, the pool is rebuilt,
	// and every node keeps its address.
	Expect(changeRange(wc, "grow", func(r *ippoolv1.IPRange) { r.Start = "10.61.0.2" })).To(Succeed())
	Expect(w.Take()).To(ContainSubstring("the start moves, so every offset moves and the pool controller rebuilds the pool"))
	Eventually(events("NodeIPPool", "grow")).Should(ContainElement(
		"RangeChanged: The range changed from 10.61.0.10-10.61.0.20 to 10.61.0.2-10.61.0.20: rebuilt from the holders' records, 4 addresses allocated at their offsets in the new range"))
	Eventually(available("grow")).Should(HavePrefix("True ReconciledPool"))
	Eventually(func() []string { return bits("grow") }).Should(ConsistOf("10.61.0.10", "10.61.0.11", "10.61.0.12", "10.61.0.13"))
	assertIndexed("grow")
	var p ippoolv1.NodeIPPool
	Expect(k.Get(ctx, types.NamespacedName{Name: "grow"}, &p)).To(Succeed())
	Expect([]any{p.Status.Start, p.Status.End, p.Status.Size, p.Status.Allocated}).To(Equal([]any{"10.61.0.2", "10.61.0.20", int64(19), int64(4)}))
	for node, ip := range want {
		Expect(held(node+".grow", "grow")).To(Equal([]string{ip}), "%s keeps its address", node)
		Expect(enactmentState(node + ".grow")()).To(HavePrefix("Available"))
	}

	// Excludes holding no address come and go; a new node skips them.
	Expect(changeRange(k, "grow", func(r *ippoolv1.IPRange) { r.Exclude = []string{"10.61.0.2", "10.61.0.4/31"} })).To(Succeed())
	Eventually(events("NodeIPPool", "grow")).Should(ContainElement(HavePrefix("RangeChanged: The excludes of the range 10.61.0.2-10.61.0.20 changed")))
	Eventually(available("grow")).Should(HavePrefix("True ReconciledPool"))
	dir := t.TempDir()
	addNode(t, dir, "grow05", "grow")
	Eventually(enactmentState("grow05.grow")).Should(HavePrefix("Available"))
	Expect(held("grow05.grow", "grow")).To(Equal([]string{"10.61.0.3"}))
	Expect(changeRange(k, "grow", func(r *ippoolv1.IPRange) { r.Exclude = []string{"10.61.0.2"} })).To(Succeed())
	Eventually(available("grow")).Should(HavePrefix("True ReconciledPool"))
	addNode(t, dir, "grow06", "grow")
	Eventually(enactmentState("grow06.grow")).Should(HavePrefix("Available"))
	Expect(held("grow06.grow", "grow")).To(Equal([]string{"10.61.0.4"}), "a removed exclude hands its addresses out again")
	assertIndexed("grow")

	// A reservation the range does not hand out is refused.
	err := changeSpec(k, "grow", func(s *ippoolv1.NodeIPPoolSpec) {
		s.Reservations = []ippoolv1.Reservation{{IP: "10.61.0.2", Node: "grow09"}, {IP: "10.61.0.50", Node: "grow09"}}
	})
	Expect(err).To(HaveOccurred())
	for _, s := range []string{`spec.reservations[10.61.0.2].ip: Invalid value: "10.61.0.2": cannot be handed out: it is excluded`,
		`spec.reservations[10.61.0.50].ip: Invalid value: "10.61.0.50": cannot be handed out: it is outside the range 10.61.0.2-10.61.0.20`} {
		Expect(err.Error()).To(ContainSubstring(s))
	}
	var all []string
	for _, n := range []string{"grow01", "grow02", "grow03", "grow04", "grow05", "grow06"} {
		all = append(all, held(n+".grow", "grow")...)
	}
	slices.Sort(all)
	Expect(slices.Compact(all)).To(HaveLen(6), "distinct addresses")
}
