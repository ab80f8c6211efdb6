package poolwrite_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestTogetherKeepsEachAskApart: the asks that arrive while a pool's write
// is in flight go in the next write together, on a real API server, and
// each is its own: an ask that fails or refuses leaves nothing in the pool
// (though it changed its copy first) and its error reaches it alone, the
// others' addresses are taken, and the trail gives each address the reason
// of its own asker.
func TestTogetherKeepsEachAskApart(t *testing.T) {
	RegisterTestingT(t)
	pool := newPool("together", "10.84.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	writes, release := holdFirstWrite(w, nil)
	var mu sync.Mutex
	reasons := map[string]string{}
	w.Audit = func(_ context.Context, changes []audit.Change) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range changes {
			reasons[c.Address.String()] = fmt.Sprintf("%s %s %s: %s", c.Event, c.Holder, c.Reason, c.Evidence)
		}
	}
	errBroken := errors.New("could not read what it needs")
	// ask takes ip for the claim who with a reason of its own, then
	// fails with fail, or refuses (nothing changed, though it changed its
	// copy) when refuse is set.
	ask := func(who, ip string, fail error, refuse bool) error {
		ctx := audit.WithReason(ctx, "Served", who+" asks")
		return w.Together(ctx, pool, func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			if err := alloc.AllocateIP(netip.MustParseAddr(ip)); err != nil {
				return false, err
			}
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Holder: holder.ForClaim("tenant", who).String(),
				Token: who, Since: metav1.Now()})
			return !refuse, fail
		})
	}
	first := make(chan error, 1)
	go func() { first <- ask("first", "10.84.0.1", nil, false) }()
	Eventually(writes.Load).Should(BeEquivalentTo(1))

	type result struct {
		who string
		err error
	}
	results := make(chan result, 4)
	for _, a := range []struct {
		who, ip string
		fail    error
		refuse  bool
	}{
		{who: "a", ip: "10.84.0.2"},
		{who: "broken", ip: "10.84.0.3", fail: errBroken},
		{who: "refused", ip: "10.84.0.4", refuse: true},
		{who: "b", ip: "10.84.0.5"},
	} {
		go func() { results <- result{a.who, ask(a.who, a.ip, a.fail, a.refuse)} }()
	}
	Eventually(func() int { return poolwrite.TogetherForming(w, pool.UID) }).Should(Equal(4))
	close(release)
	Expect(<-first).To(Succeed())
	for range 4 {
		r := <-results
		if r.who == "broken" {
			Expect(r.err).To(MatchError(errBroken), r.who)
		} else {
			Expect(r.err).NotTo(HaveOccurred(), r.who)
		}
	}
	Expect(writes.Load()).To(BeEquivalentTo(2), "the four asks that waited, in one write")

	now := getPool("together")
	alloc, err := poolstatus.Allocator(now)
	Expect(err).NotTo(HaveOccurred())
	var held []string
	for ip := range alloc.Offsets() {
		a, _ := alloc.Range().IP(ip)
		held = append(held, a.String())
	}
	Expect(held).To(Equal([]string{"10.84.0.1", "10.84.0.2", "10.84.0.5"}))
	var entries []string
	for _, e := range now.Status.InFlight {
		entries = append(entries, e.IP+" "+e.Token)
	}
	slices.Sort(entries)
	Expect(entries).To(Equal([]string{"10.84.0.1 first", "10.84.0.2 a", "10.84.0.5 b"}))
	Expect(poolstatus.Vouched(now)).To(BeTrue())
	Eventually(func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(reasons)
	}, 5*time.Second).Should(Equal(map[string]string{
		"10.84.0.1": "taken IPAddressClaim/tenant/first Served: first asks",
		"10.84.0.2": "taken IPAddressClaim/tenant/a Served: a asks",
		"10.84.0.5": "taken IPAddressClaim/tenant/b Served: b asks",
	}))
}

// TestTogetherTellsAFailedWriteToThoseItWasFor: when the shared write
// fails (here its retries run out, another writer changing the pool before
// each attempt), the callers whose changes it carried get its error, and a
// caller that asked for no change (it found its address already, or was
// refused) on the pool as read does not: its answer did not depend on the
// write. One refused because of an earlier caller's change, which was
// not written, gets the error: its refusal does not stand.
func TestTogetherTellsAFailedWriteToThoseItWasFor(t *testing.T) {
	RegisterTestingT(t)
	pool := newPool("together-failed", "10.85.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	w.Backoff.Steps = 2
	writes, release := holdFirstWrite(w, func(name string, n int32) {
		// Another writer gets there first, at every later attempt.
		bump := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"bump":"%d"}}}`, n)))
		Expect(k.Patch(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}, bump)).To(Succeed())
	})
	// refusedIfTaken asks for ip, and is refused if it is taken.
	refusedIfTaken := func(ip string) poolwrite.Mutation {
		return func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			if alloc.HasIP(netip.MustParseAddr(ip)) {
				return false, nil
			}
			return true, alloc.AllocateIP(netip.MustParseAddr(ip))
		}
	}
	first := make(chan error, 1)
	go func() { first <- w.Together(ctx, pool, take("10.85.0.1")) }()
	Eventually(writes.Load).Should(BeEquivalentTo(1))
	// In this order in the group.
	asks := []struct {
		who    string
		mutate poolwrite.Mutation
		told   bool
	}{
		{who: "refused", mutate: func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			return false, alloc.AllocateIP(netip.MustParseAddr("10.85.0.3")) // changed its copy, then refused
		}},
		{who: "resumes", mutate: func(*ippoolv1.NodeIPPool, *ippool.Allocator) (bool, error) { return false, nil }},
		{who: "takes", mutate: take("10.85.0.2"), told: true},
		{who: "refused after it", mutate: refusedIfTaken("10.85.0.2"), told: true},
	}
	results := make([]chan error, len(asks))
	for i, a := range asks {
		results[i] = make(chan error, 1)
		go func() { results[i] <- w.Together(ctx, pool, a.mutate) }()
		Eventually(func() int { return poolwrite.TogetherForming(w, pool.UID) }).Should(Equal(i + 1))
	}
	close(release)
	Expect(<-first).To(Succeed())
	for i, a := range asks {
		if err := <-results[i]; a.told {
			Expect(err).To(MatchError(poolwrite.ErrRetriesExhausted), "%s: the change it depends on was not written", a.who)
		} else {
			Expect(err).NotTo(HaveOccurred(), "%s asked for no write on the pool as read", a.who)
		}
	}
	alloc, err := poolstatus.Allocator(getPool("together-failed"))
	Expect(err).NotTo(HaveOccurred())
	Expect(alloc.Count()).To(BeEquivalentTo(1), "only the first write's address")
}

// TestTogetherOutlivesAPanic: a mutation that panics in a shared write
// fails its own caller only (told so, not left to crash the caller whose
// goroutine writes), the others of its group are written, and the pool's
// next write goes ahead.
func TestTogetherOutlivesAPanic(t *testing.T) {
	RegisterTestingT(t)
	pool := newPool("together-panic", "10.86.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	writes, release := holdFirstWrite(w, nil)
	first := make(chan error, 1)
	go func() { first <- w.Together(ctx, pool, take("10.86.0.1")) }()
	Eventually(writes.Load).Should(BeEquivalentTo(1))
	panicked, taken := make(chan error, 1), make(chan error, 1)
	go func() {
		panicked <- w.Together(ctx, pool, func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			_ = alloc.AllocateIP(netip.MustParseAddr("10.86.0.9"))
			panic("a bug")
		})
	}()
	Eventually(func() int { return poolwrite.TogetherForming(w, pool.UID) }).Should(Equal(1))
	go func() { taken <- w.Together(ctx, pool, take("10.86.0.2")) }()
	Eventually(func() int { return poolwrite.TogetherForming(w, pool.UID) }).Should(Equal(2))
	close(release)
	Expect(<-first).To(Succeed())
	Expect(<-panicked).To(MatchError(ContainSubstring("panicked")))
	Expect(<-taken).To(Succeed())
	Expect(w.Together(ctx, pool, take("10.86.0.3"))).To(Succeed(), "the pool's next write")
	alloc, err := poolstatus.Allocator(getPool("together-panic"))
	Expect(err).NotTo(HaveOccurred())
	Expect(alloc.HasIP(netip.MustParseAddr("10.86.0.9"))).To(BeFalse(), "nothing of the mutation that panicked")
	Expect(alloc.Count()).To(BeEquivalentTo(3))
}

// holdFirstWrite holds w's first pool write in flight until release is
// closed, so that the callers who come meanwhile form a group, and tells
// later, if set, of every later write (with the count so far); writes
// counts them all.
func holdFirstWrite(w *poolwrite.Writer, later func(pool string, n int32)) (writes *atomic.Int32, release chan struct{}) {
	writes, release = &atomic.Int32{}, make(chan struct{})
	w.OnWrite = func(pool string) {
		switch n := writes.Add(1); {
		case n == 1:
			<-release
		case later != nil:
			later(pool, n)
		}
	}
	return writes, release
}

// take is a mutation that takes ip.
func take(ip string) poolwrite.Mutation {
	return func(_ *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
		return true, alloc.AllocateIP(netip.MustParseAddr(ip))
	}
}
