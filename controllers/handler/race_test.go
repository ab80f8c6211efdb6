package handler_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

const raceNodes = 50

const twoPoolState = `interfaces:
- name: eth1
  ipv4:
    address:
    - ip: "{{ capture.a.ip }}"
      prefix-length: "{{ capture.a.prefix-length }}"
- name: eth2
  ipv6:
    address:
    - ip: "{{ capture.b.ip }}"
      prefix-length: "{{ capture.b.prefix-length }}"
`

// raceGrace is the pool controller's grace period in the race: a quarter
// of the default, not the seconds other tests use. With fifty writers on
// one pool and the race detector on a loaded machine, a handler's two pool
// writes and its record take tens of seconds, and a grace shorter than
// that revokes (fences) every attempt in turn, so that nodes never finish
// (seen with 3 s while another suite ran beside it).
const raceGrace = 30 * time.Second

// roundDeadline is how long the nodes of one round have, together, to end
// with their addresses: three rounds fit in the package's test timeout
// with the other tests.
const roundDeadline = 7 * time.Minute

// TestRaceManyHandlersTwoPools starts 50 handlers at once on one policy that
// draws from an IPv4 and an IPv6 pool, each taking its addresses itself
// (the specification's handler allocation, --self-allocate), a few times
// over: every node ends with exactly one address from each pool, no address
// is held twice, and each pool's bitmap is exactly the set of addresses the
// enactments record. A pool controller runs, as in a cluster: on a busy
// machine a handler's give-back of an address whose record lost the race
// can run out of retries, and the controller revokes such an entry.
func TestRaceManyHandlersTwoPools(t *testing.T) {
	for round := 1; round <= 3; round++ {
		t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) { raceRound(t, round) })
	}
}

func raceRound(t *testing.T, round int) {
	RegisterTestingT(t)
	role := fmt.Sprintf("race%d", round)
	nodes := newNodes(t, role+"-", raceNodes, map[string]string{"role": role})
	poolA, poolB := role+"-a", role+"-b"
	// Barely larger than the cluster, so that everyone fights for the same
	// lowest offsets.
	// Each round its own ranges: the last round's pools may still be
	// terminating (their quarantines wait for the departure hold), and
	// newPool marks a pool available by hand, where the pool controller
	// would refuse one that overlaps them.
	a, b := fmt.Sprintf("10.90.%d", round), fmt.Sprintf("fd00:90:%d:", round)
	newPool(t, poolA, ippoolv1.IPRange{CIDR: a + ".0/24", Start: a + ".1", End: a + ".60", Exclude: []string{a + ".8/30"}}, true)
	newPool(t, poolB, ippoolv1.IPRange{CIDR: b + ":/64", Start: b + ":1", End: b + ":40"}, true)
	newPolicy(t, role, map[string]string{"role": role},
		map[string]string{"a": "ippool." + poolA + ".allocate", "b": "ippool." + poolB + ".allocate"}, twoPoolState)

	// The suite runs the policy and enactment controllers already.
	pc, err := cfg.StartPoolController(raceGrace, nil, func(pc *envtest.PoolController) { pc.Policies, pc.Enactments = nil, nil })
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = pc.Stop() })

	metrics := handler.NewMetrics()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.Collectors()...)
	var wg sync.WaitGroup
	for _, nd := range nodes {
		nd.Metrics = metrics
		wg.Go(func() { start(t, nd) })
	}
	wg.Wait()

	// One deadline for the round, not one per node: this is a test of
	// who ends up with what, not of speed (make bench-scale measures
	// that); on a quiet machine a round takes a minute or two.
	deadline := time.Now().Add(roundDeadline)
	for _, nd := range nodes {
		Eventually(enactmentState(nd.Name, role), max(time.Until(deadline), time.Second)).Should(HavePrefix("Available"))
		if len(held(nd.Name, role, poolA)) != 1 {
			e, err := getEnactment(nd.Name, role)
			t.Logf("DEBUG %s: %v %s", nd.Name, err, mustJSON(e))
		}
		Expect(held(nd.Name, role, poolA)).To(HaveLen(1), nd.Name)
		Expect(held(nd.Name, role, poolB)).To(HaveLen(1), nd.Name)
	}
	for _, pool := range []string{poolA, poolB} {
		// Entries forgotten by the pool controller leave bits that its
		// garbage collection frees once unrecorded for the grace period.
		assertIndexedWithin(pool, 3*raceGrace)
		Expect(recordedAddresses(pool)).To(HaveLen(raceNodes))
	}
	attempts, conflicts := counter(registry, "nmstate_ippool_allocation_attempts_total"), counter(registry, "nmstate_ippool_allocation_conflicts_total")
	Expect(attempts).To(BeNumerically(">=", 2*raceNodes))
	t.Logf("round %d: %v pool writes attempted, %v conflicts retried", round, attempts, conflicts)
}

func counter(registry *prometheus.Registry, name string) float64 {
	families, err := registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var sum float64
	for _, f := range families {
		if !strings.EqualFold(f.GetName(), name) {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func mustJSON(v any) string { b, _ := json.MarshalIndent(v, "", " "); return string(b) }
