package poolchange

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
)

func pool(name, cidr, start, end string, exclude ...string) *ippoolv1.NodeIPPool {
	return &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: cidr, Start: start, End: end, Exclude: exclude}}}
}

func holding(node, pool, ip string) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: node + ".static-ip",
		Labels: map[string]string{shared.EnactmentNodeLabel: node, shared.EnactmentPolicyLabel: "static-ip"}}}
	e.Status.IPPool = ippoolv1.EnactmentIPPools{pool: {Allocated: []string{ip}}}
	return e
}

// verdicts renders outcomes as "ip:verdict" in order.
func verdicts(a *Assessment) string {
	var parts []string
	for _, o := range a.Outcomes {
		parts = append(parts, o.IP.String()+":"+string(o.Verdict))
	}
	return strings.Join(parts, " ")
}

func TestAssess(t *testing.T) {
	stored := pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.15")
	stored.Status.InFlight = []ippoolv1.InFlightAddress{{IP: "10.0.0.13", Holder: "n3.static-ip", Token: "7"}}
	stored.Status.Quarantined = []ippoolv1.QuarantinedAddress{{IP: "10.0.0.20", Node: "n4", Holder: "n4.static-ip"}}
	enactments := []nncev1beta1.NodeNetworkConfigurationEnactment{
		holding("n1", "p", "10.0.0.10"), holding("n2", "p", "10.0.0.12"),
		holding("other", "q", "10.0.0.11"), // another pool's record: not this pool's holding
	}
	holdings := Holdings("p", stored, holder.OfEnactments(enactments))
	if len(holdings) != 4 || holdings[1].Kind != Recorded || holdings[2].Kind != InFlight || holdings[2].Node != "n3" ||
		holdings[3].Kind != Quarantined {
		t.Fatalf("holdings %+v", holdings)
	}
	for _, tt := range []struct {
		name     string
		proposed *ippoolv1.NodeIPPool
		verdicts string
		offsets  bool
		refused  []string // substrings of the refusals; none means allowed
		free     uint64
	}{
		{name: "end later", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.30", "10.0.0.15"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:keep 10.0.0.20:keep", free: 16},
		{name: "start earlier moves the offsets", proposed: pool("p", "10.0.0.0/24", "10.0.0.5", "10.0.0.20", "10.0.0.15"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:keep 10.0.0.20:keep", offsets: true, free: 11},
		{name: "an exclude that holds no address, another removed", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.16/30"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:keep 10.0.0.20:keep", free: 3},
		{name: "an exclude over a recorded address", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.12"),
			verdicts: "10.0.0.10:keep 10.0.0.12:move 10.0.0.13:keep 10.0.0.20:keep", free: 6,
			refused: []string{"10.0.0.12 held by node n2 (policy static-ip) would be excluded from the proposed range", "reset-ippool=p"}},
		{name: "end before an in-flight address and a quarantined one", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.12", "10.0.0.11"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:lose 10.0.0.20:drop", free: 0,
			refused: []string{"10.0.0.13 being allocated to node n3 would be outside the proposed range 10.0.0.10-10.0.0.12; the proposed range has no free address left"}},
		{name: "end before an in-flight address with room to move", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.12"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:move 10.0.0.20:drop", free: 0, refused: []string{"10.0.0.13 being allocated"}},
		{name: "grown into another pool", proposed: pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.40"),
			verdicts: "10.0.0.10:keep 10.0.0.12:keep 10.0.0.13:keep 10.0.0.20:keep", free: 27,
			refused: []string{"would overlap NodeIPPool q (10.0.0.40-10.0.0.50)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			others := []ippoolv1.NodeIPPool{*stored, *pool("q", "10.0.0.0/24", "10.0.0.40", "10.0.0.50")}
			a, err := Assess(tt.proposed, stored, holdings, others)
			if err != nil {
				t.Fatal(err)
			}
			if got := verdicts(a); got != tt.verdicts {
				t.Errorf("verdicts %s, want %s", got, tt.verdicts)
			}
			if a.OffsetsMove != tt.offsets || a.Free != tt.free {
				t.Errorf("offsets move %v, free %d; want %v, %d", a.OffsetsMove, a.Free, tt.offsets, tt.free)
			}
			errs := a.Refusals(true)
			if len(tt.refused) == 0 && len(errs) > 0 {
				t.Fatalf("refused: %v", errs)
			}
			refusals := fmt.Sprint(errs.ToAggregate())
			for _, want := range tt.refused {
				if !strings.Contains(refusals, want) {
					t.Errorf("refusals %q lack %q", refusals, want)
				}
			}
		})
	}
}

func TestAssessOffsetsAndSummary(t *testing.T) {
	stored := pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20")
	holdings := Holdings("p", stored, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1", "p", "10.0.0.12")}))
	a, err := Assess(pool("p", "10.0.0.0/24", "10.0.0.2", "10.0.0.20"), stored, holdings, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := a.Outcomes[0]
	if o.OldOffset == nil || *o.OldOffset != 2 || o.Offset == nil || *o.Offset != 10 {
		t.Errorf("offsets %v -> %v, want 2 -> 10", o.OldOffset, o.Offset)
	}
	summary := strings.Join(a.Summary(), "\n")
	for _, want := range []string{"range changes from 10.0.0.10-10.0.0.20 to 10.0.0.2-10.0.0.20", "ReconcilingPool",
		"1 holder(s) keep their address, 0 move to another, 0 find none; 18 of 19 addresses stay free"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
}

// A pool about to be created (re-created after a deletion) takes over the
// records its name still has: those outside its range move.
func TestAssessRecreated(t *testing.T) {
	holdings := Holdings("p", nil, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{
		holding("n1", "p", "10.0.0.12"), holding("n2", "p", "10.0.0.99")}))
	a, err := Assess(pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.11"), nil, holdings, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := verdicts(a); got != "10.0.0.12:move 10.0.0.99:move" {
		t.Errorf("verdicts %s", got)
	}
	a, err = Assess(pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.10"), nil, holdings, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := verdicts(a); got != "10.0.0.12:move 10.0.0.99:lose" {
		t.Errorf("verdicts %s; the second mover finds no address", got)
	}
	if a.From != "" || a.OffsetsMove {
		t.Errorf("a new pool has no stored range: %+v", a)
	}
}

func TestAssessRefusesInvalidReservationsAndRanges(t *testing.T) {
	p := pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.15")
	p.Spec.Reservations = []ippoolv1.Reservation{{IP: "10.0.0.30", Node: "n1"}, {IP: "10.0.0.15", Node: "n2"}, {IP: "10.0.0.11", Node: "n3"}}
	a, err := Assess(p, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := a.Refusals(false)
	if len(errs) != 2 {
		t.Fatalf("refusals %v, want the two invalid reservations", errs)
	}
	refusals := errs.ToAggregate().Error()
	for _, want := range []string{`spec.reservations[10.0.0.30].ip: Invalid value: "10.0.0.30": cannot be handed out: it is outside the range 10.0.0.10-10.0.0.20`,
		"spec.reservations[10.0.0.15].ip: Invalid value: \"10.0.0.15\": cannot be handed out: it is excluded"} {
		if !strings.Contains(refusals, want) {
			t.Errorf("refusals %q lack %q", refusals, want)
		}
	}
	if strings.Contains(refusals, "10.0.0.11") {
		t.Errorf("a valid reservation is refused: %s", refusals)
	}
	if _, err := Assess(pool("p", "10.0.0.0/30", "10.0.0.3", "10.0.0.3"), nil, nil, nil); err == nil {
		t.Error("a range that hands out nothing is assessed")
	}
}

func TestHoldingDescribe(t *testing.T) {
	h := Holding{IP: netip.MustParseAddr("fd00::5"), Kind: Quarantined, Node: "n1"}
	if got := h.Describe(); got != "fd00::5 quarantined after node n1" {
		t.Errorf("describe %q", got)
	}
}

// A new pool may renumber its holders and overlap others (the controller
// refuses the newer pool); only its reservations are refused.
func TestRefusalsOfANewPool(t *testing.T) {
	holdings := Holdings("p", nil, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1", "p", "10.0.0.99")}))
	a, err := Assess(pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20"), nil, holdings,
		[]ippoolv1.NodeIPPool{*pool("q", "10.0.0.0/24", "10.0.0.15", "10.0.0.30")})
	if err != nil {
		t.Fatal(err)
	}
	if errs := a.Refusals(false); len(errs) != 0 {
		t.Errorf("a new pool is refused: %v", errs)
	}
	if errs := a.Refusals(true); len(errs) != 2 {
		t.Errorf("in place, the move and the overlap are refused; got %v", errs)
	}
}

// Trimming free addresses off a range is allowed; a quarantined address
// leaving it is dropped, with a warning, not refused.
func TestAssessTrimAndIPv6(t *testing.T) {
	stored := pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.30")
	stored.Status.Quarantined = []ippoolv1.QuarantinedAddress{{IP: "10.0.0.25", Node: "gone"}}
	holdings := Holdings("p", stored, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1", "p", "10.0.0.12")}))
	a, err := Assess(pool("p", "10.0.0.0/24", "10.0.0.10", "10.0.0.20"), stored, holdings, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := verdicts(a); got != "10.0.0.12:keep 10.0.0.25:drop" {
		t.Errorf("verdicts %s", got)
	}
	if errs := a.Refusals(true); len(errs) != 0 {
		t.Errorf("trimming free addresses is refused: %v", errs)
	}
	if summary := strings.Join(a.Summary(), "\n"); !strings.Contains(summary, "10.0.0.25 quarantined after node gone") {
		t.Errorf("the dropped quarantine is not told: %s", summary)
	}

	v6 := pool("p6", "fd00::/64", "fd00::10", "fd00::20")
	holdings = Holdings("p6", v6, holder.OfEnactments([]nncev1beta1.NodeNetworkConfigurationEnactment{holding("n1", "p6", "fd00::11")}))
	a, err = Assess(pool("p6", "fd00::/64", "fd00::1", "fd00::ffff"), v6, holdings, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := a.Outcomes[0]
	if o.Verdict != Keep || *o.OldOffset != 1 || *o.Offset != 16 || !a.OffsetsMove || len(a.Refusals(true)) != 0 {
		t.Errorf("IPv6 growth: %+v, offsets %d -> %d", a, *o.OldOffset, *o.Offset)
	}
}
