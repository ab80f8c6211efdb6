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
	"k8s.io/utils/clock"

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
	var writes atomic.Int32
	release := make(chan struct{})
	w.OnWrite = func(string) {
		if writes.Add(1) == 1 {
			<-release // the first write stays in flight while the others ask
		}
	}
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
