package poolwrite

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
)

// TestGroupsGatherWhileAWriteIsInFlight: the quarantines that arrive while
// a pool's write is in flight go in the next write together, each caller
// gets its own result, and another pool is not held up.
func TestGroupsGatherWhileAWriteIsInFlight(t *testing.T) {
	var g groups[*quarantine]
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}}
	other := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "q", UID: "u2"}}
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	write := func(_ context.Context, p *ippoolv1.NodeIPPool, qs []*quarantine) error {
		if p.Name == pool.Name && len(qs) == 1 && qs[0].holder.Node == "first" {
			<-release // the first write stays in flight
		}
		mu.Lock()
		sizes = append(sizes, len(qs))
		mu.Unlock()
		for _, q := range qs {
			q.added = []string{q.holder.Node}
		}
		return nil
	}
	ctx := context.Background()
	results := make(chan []string, 10)
	quarantineAs := func(p *ippoolv1.NodeIPPool, node string) {
		q := &quarantine{holder: Holder{Node: node}, ips: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
		if written, err := g.do(ctx, p, q, write); err != nil || !written {
			t.Errorf("%s: written %t, %v", node, written, err)
		}
		results <- q.added
	}
	go quarantineAs(pool, "first")
	waitFor(t, func() bool { return forming(&g, "u1") == 0 && turnTaken(&g, "p") })

	var wg sync.WaitGroup
	for _, node := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		go func() { defer wg.Done(); quarantineAs(pool, node) }()
	}
	waitFor(t, func() bool { return forming(&g, "u1") == 4 })
	quarantineAs(other, "elsewhere") // its own pool's turn is free
	if got := <-results; !slices.Equal(got, []string{"elsewhere"}) {
		t.Fatalf("the other pool's caller got %v", got)
	}
	close(release)
	wg.Wait()
	var got []string
	for range 5 {
		got = append(got, <-results...)
	}
	slices.Sort(got)
	if want := []string{"a", "b", "c", "d", "first"}; !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	slices.Sort(sizes)
	if want := []int{1, 1, 4}; !slices.Equal(sizes, want) {
		t.Fatalf("writes of %v quarantines, want %v (the four that waited in one write)", sizes, want)
	}
}

func forming[M any](g *groups[M], uid string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if grp := g.forming[ktypes.UID(uid)]; grp != nil {
		return len(grp.members)
	}
	return 0
}

func turnTaken[M any](g *groups[M], pool string) bool {
	g.mu.Lock()
	turn := g.turns[pool]
	g.mu.Unlock()
	if turn == nil || turn.TryLock() {
		if turn != nil {
			turn.Unlock()
		}
		return false
	}
	return true
}

func waitFor(t *testing.T, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestGroupsPassTheTurnOnAfterAPanic: a group write that panics tells its
// waiting members it failed, and the pool's next write goes ahead.
func TestGroupsPassTheTurnOnAfterAPanic(t *testing.T) {
	var g groups[*quarantine]
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"}}
	ctx := context.Background()
	release := make(chan struct{})
	starts := 0
	var mu sync.Mutex
	write := func(_ context.Context, _ *ippoolv1.NodeIPPool, qs []*quarantine) error {
		mu.Lock()
		starts++
		n := starts
		mu.Unlock()
		switch n {
		case 1:
			<-release // in flight while the next group forms
		case 2:
			panic("a bug")
		}
		return nil
	}
	do := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = errors.New("panicked")
			}
		}()
		_, err = g.do(ctx, pool, &quarantine{}, write)
		return err
	}
	first := make(chan error, 1)
	go func() { first <- do() }()
	waitFor(t, func() bool { return turnTaken(&g, "p") })
	results := make(chan error, 2)
	for range 2 {
		go func() { results <- do() }()
	}
	waitFor(t, func() bool { return forming(&g, "u1") == 2 })
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	got := []error{<-results, <-results}
	if !slices.ContainsFunc(got, func(err error) bool { return errors.Is(err, errWriteFailed) }) {
		t.Fatalf("the members got %v, want one told %v (the other, which wrote, panicked)", got, errWriteFailed)
	}
	done := make(chan error, 1)
	go func() { done <- do() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the next write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's turn was kept by the write that panicked")
	}
}
