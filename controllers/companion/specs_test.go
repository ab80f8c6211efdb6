package companion

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// readsCounted counts the reads through a reader.
type readsCounted struct {
	client.Reader
	n int
}

func (r *readsCounted) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.n++
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestSpecOfOneGeneration: the spec of a generated policy is the one of
// the generation its metadata shows, known from this process's write or
// read once from the API server; a read that finds another generation
// (the cache behind a write) or another incarnation is an error, never
// that policy's spec taken for the generation the cache shows.
func TestSpecOfOneGeneration(t *testing.T) {
	ctx := context.Background()
	onServer := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: "u1", Generation: 3}}
	onServer.Spec.DesiredState = shared.NewState("interfaces: [{name: eth1, mtu: 1400}]\n")
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(onServer).Build()
	if err := c.Get(ctx, client.ObjectKeyFromObject(onServer), onServer); err != nil { // as the server stores it
		t.Fatal(err)
	}
	reads := &readsCounted{Reader: c}
	r := &Reconciler{Client: c, APIReader: reads}
	meta := func(uid types.UID, generation int64) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: uid, Generation: generation}}
	}

	spec, err := r.specOf(ctx, meta("u1", 3))
	if err != nil || string(spec.DesiredState.Raw) != string(onServer.Spec.DesiredState.Raw) || reads.n != 1 {
		t.Fatalf("first read: spec %v, err %v, %d reads; want the server's, one read", spec, err, reads.n)
	}
	if _, err := r.specOf(ctx, meta("u1", 3)); err != nil || reads.n != 1 {
		t.Fatalf("known spec read again: err %v, %d reads", err, reads.n)
	}

	// This process wrote generation 4; the cache still shows 3.
	written := onServer.DeepCopy()
	written.Generation = 4
	written.Spec.DesiredState = shared.NewState("interfaces: [{name: eth1, mtu: 1500}]\n")
	if err := c.Update(ctx, written); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(written), written); err != nil { // as the server stores it
		t.Fatal(err)
	}
	r.reads.remember(written)
	if _, err := r.specOf(ctx, meta("u1", onServer.Generation)); err == nil || !strings.Contains(err.Error(), "the cache shows 3") {
		t.Errorf("the cache behind: err %v, want the generations told apart", err)
	}
	before := reads.n
	if spec, err := r.specOf(ctx, meta("u1", written.Generation)); err != nil || string(spec.DesiredState.Raw) != string(written.Spec.DesiredState.Raw) || reads.n != before {
		t.Errorf("the written generation: spec %q, err %v, %d reads; want %q, no read", spec.DesiredState.Raw, err, reads.n-before, written.Spec.DesiredState.Raw)
	}

	// The policy created again under the name.
	if _, err := r.specOf(ctx, meta("u0", 3)); err == nil || !strings.Contains(err.Error(), "created again") {
		t.Errorf("another incarnation: err %v, want it refused", err)
	}
}

// TestDeletedPolicyIsForgotten: once a generated policy is deleted, by
// anyone, the process forgets its spec, its status read and its own write
// of it: a write the cache never showed before the deletion must not have
// its node wait for that generation for good (stale), and a policy deleted
// by someone else must not stay in memory. What is known of a later
// incarnation of the name stays.
func TestDeletedPolicyIsForgotten(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r := &Reconciler{Clock: clk}
	old := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: "u1", Generation: 2}}
	r.reads.remember(old)
	r.reads.handled.Store(old.Name, handledRead{uid: old.UID})
	r.written.Store(old.Name, writtenAt{uid: old.UID, generation: old.Generation, at: clk.Now()})
	if !r.stale(ctx, old.Name, nil) {
		t.Fatal("a write the cache has not shown is not stale")
	}
	deleted := event.DeleteEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: old.ObjectMeta}}
	if !r.forgetDeleted().Delete(deleted) {
		t.Fatal("the deletion of a generated policy is not looked at")
	}
	if r.stale(ctx, old.Name, nil) {
		t.Error("the node of a policy deleted before the cache showed this process's write of it waits for that write for good")
	}
	for what, m := range map[string]*sync.Map{"spec": &r.reads.specs, "status read": &r.reads.handled} {
		if _, ok := m.Load(old.Name); ok {
			t.Errorf("the %s of a deleted policy is kept", what)
		}
	}

	newer := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: old.Name, UID: "u2", Generation: 1}}
	r.reads.remember(newer)
	r.reads.handled.Store(newer.Name, handledRead{uid: newer.UID})
	r.written.Store(newer.Name, writtenAt{uid: newer.UID, generation: newer.Generation, at: clk.Now()})
	r.forgetDeleted().Delete(deleted) // the earlier incarnation's event, late
	for what, m := range map[string]*sync.Map{"spec": &r.reads.specs, "status read": &r.reads.handled, "write": &r.written} {
		if _, ok := m.Load(newer.Name); !ok {
			t.Errorf("the %s of a policy created again is forgotten on its earlier incarnation's deletion", what)
		}
	}
	// The cache still shows the earlier incarnation, at a higher
	// generation: the write of the later one is not shown yet.
	if !r.stale(ctx, newer.Name, &metav1.PartialObjectMetadata{ObjectMeta: old.ObjectMeta}) {
		t.Error("a cache showing the earlier incarnation is taken for this process's write of the later one")
	}
	if r.stale(ctx, newer.Name, &metav1.PartialObjectMetadata{ObjectMeta: newer.ObjectMeta}) {
		t.Error("the later incarnation's write, shown by the cache, is still waited on")
	}
}

// TestHandledReadsBackOff: whether kubernetes-nmstate's handler runs on a
// node that waits for its enactment is read again every handledTTL while
// the wait is young, then every quarter of the wait so far, at most every
// handledTTLMax; one whose enactment progresses every progressPoll,
// however long it waited before; a read of another generation or
// incarnation stands for nothing.
func TestHandledReadsBackOff(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	g := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: "u1", Generation: 2}}
	for _, c := range []struct {
		name          string
		waited, since time.Duration // the wait's length at the last read, and the time since it
		floor         time.Duration
		backOff       bool
		stands        bool
	}{
		{"a young wait, read 4s ago", 0, 4 * time.Second, handledTTL, true, true},
		{"a young wait, read 5s ago", 0, handledTTL, handledTTL, true, false},
		{"a wait of 20s, read 5s ago", 20 * time.Second, handledTTL, handledTTL, true, true},
		{"a wait of 20s, read 7s ago", 20 * time.Second, 7 * time.Second, handledTTL, true, false},
		{"a wait of 2m, read 39s ago", 2 * time.Minute, 39 * time.Second, handledTTL, true, true},
		{"a wait of 2m, read 41s ago", 2 * time.Minute, 41 * time.Second, handledTTL, true, false},
		{"a wait of an hour, read 59s ago", time.Hour, 59 * time.Second, handledTTL, true, true},
		{"a wait of an hour, read a minute ago", time.Hour, handledTTLMax, handledTTL, true, false},
		{"a progressing one, read 29s ago", 0, 29 * time.Second, progressPoll, false, true},
		{"a progressing one, read 30s ago", 0, progressPoll, progressPoll, false, false},
		{"a progressing one after a wait of an hour, read 30s ago", time.Hour, progressPoll, progressPoll, false, false},
	} {
		at := start.Add(c.waited)
		h := handledRead{uid: g.UID, generation: g.Generation, since: start, at: at, waiting: c.backOff}
		if got := h.stands(g, c.floor, c.backOff, at.Add(c.since)); got != c.stands {
			t.Errorf("%s: the read stands %v, want %v", c.name, got, c.stands)
		}
	}
	// Read while the node waited (its handler may not have started), and
	// its enactment progresses a second later: read again at once.
	early := handledRead{uid: g.UID, generation: g.Generation, since: start, at: start, waiting: true, unhandled: true}
	if early.stands(g, progressPoll, false, start.Add(time.Second)) {
		t.Error("a read made while the node waited for its enactment stands once the enactment progresses")
	}
	h := handledRead{uid: g.UID, generation: g.Generation, since: start, at: start}
	for _, other := range []*metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Name: g.Name, UID: g.UID, Generation: 3}},
		{ObjectMeta: metav1.ObjectMeta{Name: g.Name, UID: "u2", Generation: 2}},
	} {
		if h.stands(other, handledTTL, true, start.Add(time.Second)) {
			t.Errorf("a read of %s generation %d stands for %s generation %d", g.UID, g.Generation, other.UID, other.Generation)
		}
	}
}

// TestUnhandledReadAgainOnceItsNodeProgresses: a read of a generated
// policy's status made while its node waited for its enactment, which
// said kubernetes-nmstate's handler runs on no node, is made again as
// soon as the node's enactment of that generation progresses (the
// handler has started since: the node must count against maxUnavailable
// while it applies); that read then stands for progressPoll.
func TestUnhandledReadAgainOnceItsNodeProgresses(t *testing.T) {
	ctx := context.Background()
	onServer := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: "u1", Generation: 1}}
	onServer.Status.Conditions = shared.ConditionList{{Type: shared.NodeNetworkConfigurationPolicyConditionDegraded,
		Status: corev1.ConditionTrue, Reason: shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode}}
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(onServer).WithStatusSubresource(onServer).Build()
	reads := &readsCounted{Reader: c}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r := &Reconciler{Client: c, APIReader: reads, Clock: clk}
	g := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: onServer.Name, UID: onServer.UID, Generation: 1}}
	w := &world{generated: map[string]*metav1.PartialObjectMetadata{"node01": g},
		enactments: map[string]*nncev1beta1.NodeNetworkConfigurationEnactment{}}
	ask := func(step time.Duration, want bool, reads0 int, what string) {
		t.Helper()
		clk.Step(step)
		if got := r.unhandled(ctx, w, "node01"); got != want || reads.n != reads0 {
			t.Errorf("%s: unhandled %v after %d reads, want %v after %d", what, got, reads.n, want, reads0)
		}
	}

	ask(0, true, 1, "waiting, first read")
	ask(time.Second, true, 1, "waiting, a second later")

	// The handler starts: the policy's status stops saying it matches no
	// node, and the node's enactment of generation 1 progresses.
	onServer.Status.Conditions = nil
	if err := c.Status().Update(ctx, onServer); err != nil {
		t.Fatal(err)
	}
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: shared.EnactmentKey("node01", g.Name).Name}}
	e.Status.PolicyGeneration = 1
	w.enactments[e.Name] = e
	ask(time.Second, false, 2, "progressing, a second after a read made while it waited")
	ask(progressPoll-time.Second, false, 2, "progressing, read a poll less a second ago")
	ask(time.Second, false, 3, "progressing, read a poll ago")
}

// TestWrittenPolicyGoneUnseen: a generated policy this process wrote and
// that went without its deletion event reaching it (deleted while the
// watch was down: the relist does not tell what it missed) does not
// leave its node waiting for the write for good. Once the write has gone
// unseen for writtenConfirm, the API server is asked: a policy of that
// incarnation still there is waited for (and asked about again only a
// writtenConfirm later); none, or another incarnation, and the write is
// forgotten.
func TestWrittenPolicyGoneUnseen(t *testing.T) {
	ctx := context.Background()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	there := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node02", UID: "u2", Generation: 1}}
	again := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node03", UID: "u4", Generation: 1}}
	reads := &readsCounted{Reader: fake.NewClientBuilder().WithScheme(s).WithObjects(there, again).Build()}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r := &Reconciler{APIReader: reads, Clock: clk}
	noted := func(name string, uid types.UID) {
		r.reads.remember(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Generation: 1}})
		r.reads.handled.Store(name, handledRead{uid: uid, generation: 1})
	}
	noted("p-node01", "u1")
	noted(there.Name, there.UID)
	for _, w := range []struct {
		name string
		uid  types.UID
	}{{"p-node01", "u1"}, {there.Name, there.UID}, {again.Name, "u3"}} {
		r.written.Store(w.name, writtenAt{uid: w.uid, generation: 1, at: clk.Now()})
	}
	stale := func(name string) bool { return r.stale(ctx, name, nil) }

	clk.Step(writtenConfirm - time.Second)
	for _, name := range []string{"p-node01", there.Name, again.Name} {
		if !stale(name) {
			t.Errorf("%s: a write not shown for less than %v is not waited for", name, writtenConfirm)
		}
	}
	if reads.n != 0 {
		t.Errorf("%d reads before the write went unseen for %v", reads.n, writtenConfirm)
	}
	clk.Step(time.Second)
	if stale("p-node01") {
		t.Error("a write of a policy gone from the API server is waited for")
	}
	for what, m := range map[string]*sync.Map{"spec": &r.reads.specs, "status read": &r.reads.handled} {
		if _, ok := m.Load("p-node01"); ok {
			t.Errorf("the %s of a written policy gone from the API server unseen is kept", what)
		}
		if _, ok := m.Load(there.Name); !ok {
			t.Errorf("the %s of a written policy still on the API server is forgotten", what)
		}
	}
	if !stale(there.Name) {
		t.Error("a write of a policy still on the API server is forgotten")
	}
	if stale(again.Name) {
		t.Error("a write of a policy created again (another incarnation) is waited for")
	}
	if reads.n != 3 {
		t.Errorf("%d reads, want one for each write", reads.n)
	}
	if !stale(there.Name) || reads.n != 3 {
		t.Errorf("a write confirmed on the API server is asked about again at once (%d reads)", reads.n)
	}
	clk.Step(writtenConfirm)
	if waits := stale(there.Name); !waits || reads.n != 4 {
		t.Errorf("a write confirmed %v ago: stale %v after %d reads, want waited for after 4", writtenConfirm, waits, reads.n)
	}
}

// TestReadOfPolicyDeletedMeanwhile: a generated policy read from the API
// server and deleted before the read is noted (its deletion event gone
// by) leaves nothing in memory: its spec and status reads are noted only
// while the cache still shows that incarnation, whose deletion event
// then drops them.
func TestReadOfPolicyDeletedMeanwhile(t *testing.T) {
	ctx := context.Background()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	onServer := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p-node01", UID: "u1", Generation: 1}}
	server := fake.NewClientBuilder().WithScheme(s).WithObjects(onServer).Build()
	g := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: onServer.Name, UID: onServer.UID, Generation: 1}}
	w := &world{generated: map[string]*metav1.PartialObjectMetadata{"node01": g},
		enactments: map[string]*nncev1beta1.NodeNetworkConfigurationEnactment{}}
	laterIncarnation := onServer.DeepCopy()
	laterIncarnation.UID = "u2"
	for _, c := range []struct {
		cache string
		shows []client.Object
		kept  bool
	}{
		{"shows the policy", []client.Object{onServer.DeepCopy()}, true},
		{"shows it deleted", nil, false},
		{"shows it created again", []client.Object{laterIncarnation}, false},
	} {
		cache := fake.NewClientBuilder().WithScheme(s).WithObjects(c.shows...).Build()
		r := &Reconciler{Client: cache, APIReader: server, Clock: clocktesting.NewFakeClock(time.Now())}
		if _, err := r.specOf(ctx, g); err != nil {
			t.Fatalf("cache %s: read the spec: %v", c.cache, err)
		}
		r.unhandled(ctx, w, "node01")
		for what, m := range map[string]*sync.Map{"spec": &r.reads.specs, "status read": &r.reads.handled} {
			if _, ok := m.Load(onServer.Name); ok != c.kept {
				t.Errorf("cache %s: the %s noted %v, want %v", c.cache, what, ok, c.kept)
			}
		}
	}
}
