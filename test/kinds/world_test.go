package kinds_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// world is one way run against one kind: a pool named name, the machines
// whose holders draw from it (name-1, name-2, ...), and what watches them.
type world struct {
	kind       *kind
	name, pool string
	// maxUnavailable, if set, paces the rollout of what the admin writes.
	maxUnavailable *intstr.IntOrString
	dir            string
	// machines are the simulated machines by name; nil for a claim's.
	mu       sync.Mutex
	machines map[string]*envtest.Node
	nics     *envtest.NICSampler
	holders  *holderSampler
	upstream *envtest.Upstream
}

// newWorld starts kind's mode and a pool over net.0/24 handing out
// net.first to net.last, and writes what the admin writes to draw from it,
// adjusted first by adjust, if given.
func newWorld(t *testing.T, kd *kind, name, net string, first, last int, adjust ...func(*world)) *world {
	t.Helper()
	RegisterTestingT(t)
	w := &world{kind: kd, name: name, pool: name, dir: t.TempDir(), machines: map[string]*envtest.Node{}}
	for _, f := range adjust {
		f(w)
	}
	w.nics = envtest.SampleNICs(t)
	kd.serve(t, w)
	w.createPool(t, net, first, last)
	w.holders = sampleHolders(t, w.pool)
	kd.hold(t, w)
	return w
}

// createPool creates the pool of w over net.0/24 from net.first to
// net.last, and waits until it is available.
func (w *world) createPool(t *testing.T, net string, first, last int) {
	t.Helper()
	envtest.CreateAvailablePool(t, k, w.pool, ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: net + ".0/24",
		Start: fmt.Sprintf("%s.%d", net, first), End: fmt.Sprintf("%s.%d", net, last)}}, grace, 45*time.Second)
}

// machine returns the name of the i-th machine.
func (w *world) machine(i int) string { return fmt.Sprintf("%s-%d", w.name, i) }

// add counts machine as w's, with its simulated network (nil for a
// claim's), and samples that network.
func (w *world) add(machine string, nd *envtest.Node) {
	w.mu.Lock()
	w.machines[machine] = nd
	w.mu.Unlock()
	if nd != nil {
		w.nics.Watch(nd)
	}
}

// names returns the machines of w, sorted.
func (w *world) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.machines))
}

// address returns the address that machine's holder records from the
// pool (allocated, not releasing), or "".
func (w *world) address(machine string) func() (string, error) {
	return func() (string, error) {
		records, err := w.holders.records()
		if a := records[machine].Allocated; len(a) > 0 {
			return a[0], err
		}
		return "", err
	}
}

// held returns every address machine's holder records from the pool:
// allocated, then releasing.
func (w *world) held(machine string) func() ([]string, error) {
	return func() ([]string, error) {
		records, err := w.holders.records()
		return records[machine].Held(), err
	}
}

// carried returns the addresses machine's eth1 carries, "ip/prefix";
// none for a machine that is none of ours (a claim's).
func (w *world) carried(machine string) func() []string {
	return func() []string {
		w.mu.Lock()
		nd := w.machines[machine]
		w.mu.Unlock()
		if nd == nil {
			return nil
		}
		return nd.ConfiguredAll("eth1")
	}
}

// settled waits until machine's holder records an address and, for a kind
// that puts it on a NIC, its machine carries that one alone; it returns
// the address.
func (w *world) settled(machine string) string {
	Eventually(w.address(machine)).ShouldNot(BeEmpty(), "%s holds an address", machine)
	ip := must(w.address(machine)())
	if w.kind.nic {
		Eventually(w.carried(machine)).Should(Equal([]string{ip + "/24"}), "%s carries %s", machine, ip)
	}
	return ip
}

// bits returns the addresses set in the pool's bitmap.
func (w *world) bits() ([]string, error) { return envtest.PoolAddresses(ctx, k, w.pool) }

// entries returns the addresses of the pool's in-flight and quarantine
// entries.
func (w *world) entries() ([]string, error) { return envtest.EntryAddresses(ctx, k, w.pool) }

// must returns v, failing the test on err.
func must[T any](v T, err error) T {
	Expect(err).NotTo(HaveOccurred())
	return v
}

// poolEvents returns "Reason: note" of the Events about the pool.
func (w *world) poolEvents() ([]string, error) { return envtest.Events(ctx, k, "NodeIPPool", w.pool) }

// invariants checks what no way may break, over every sample taken:
// no address on two NICs, and none recorded by two holders.
func (w *world) invariants() {
	Expect(w.nics.OnTwoNICs()).To(BeEmpty(), "one address, one NIC")
	Expect(w.holders.twice()).To(BeEmpty(), "one address, one holder")
}

// holderSampler lists the holders of a pool again and again as the pool
// controller does (holder.List, every kind), and keeps every sample in
// which one address had two holders.
type holderSampler struct {
	pool string
	mu   sync.Mutex
	dups []string
}

// sampleHolders samples the holders of pool every 50ms until the test
// ends.
func sampleHolders(t *testing.T, pool string) *holderSampler {
	s := &holderSampler{pool: pool}
	envtest.Every(t, 50*time.Millisecond, func() { _, _ = s.records() })
	return s
}

// records lists the holders once, and returns the record of each in the
// pool, keyed by its node, or by its name where it has none (a claim,
// named after its machine).
func (s *holderSampler) records() (map[string]ippoolv1.PoolAllocation, error) {
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := k.List(ctx, &enactments); err != nil {
		return nil, err
	}
	records, err := holder.List(ctx, k, enactments.Items, holder.Every(nil))
	if err != nil {
		return nil, err
	}
	by := map[string]ippoolv1.PoolAllocation{}
	owners := map[netip.Addr][]string{}
	for _, r := range records {
		a, ok := r.Pools[s.pool]
		if !ok {
			continue
		}
		key := r.Node
		if key == "" {
			key = r.Holder.Name
		}
		by[key] = a
		for _, ip := range a.Held() {
			if addr, err := netip.ParseAddr(ip); err == nil && !slices.Contains(owners[addr], r.Holder.String()) {
				owners[addr] = append(owners[addr], r.Holder.String())
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ip, on := range owners {
		if len(on) > 1 {
			sort.Strings(on)
			s.dups = append(s.dups, fmt.Sprintf("%s held by %v", ip, on))
		}
	}
	return by, nil
}

// twice returns, after one more sample, the samples in which an address
// had two holders.
func (s *holderSampler) twice() []string {
	_ = must(s.records())
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dups)
}
