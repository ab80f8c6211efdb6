package kinds_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// way is one way to break the promise, first found for one kind of
// holder, as an admin's action or a machine's failure: run does it to the
// holders of a kind, on a /24 of its own, and checks that the promise
// holds.
type way struct {
	name string
	run  func(t *testing.T, kd *kind, name, net string)
	// na says, by kind, why the way does not reach it.
	na map[string]string
}

var ways = []way{
	{name: "NodeDeletedWhileItsMachineRuns", run: nodeDeletedWhileItsMachineRuns,
		na: map[string]string{"claim": "a claim's address is its IPAddress's until the claim goes, whatever its machine's Node does"}},
	{name: "DeletedWithCascadeForeground", run: deletedWith(metav1.DeletePropagationForeground)},
	{name: "DeletedWithCascadeOrphan", run: deletedWith(metav1.DeletePropagationOrphan)},
	{name: "NodeThatNeverApplies", run: nodeThatNeverApplies, na: map[string]string{"claim": "claims have no rollout"}},
	{name: "ReleaseThatFailed", run: releaseThatFailed, na: map[string]string{"claim": "no NIC of ours to take it off"}},
	{name: "AddressOutsideRange", run: addressOutsideRange},
	{name: "Reset", run: reset, na: map[string]string{"claim": "a claim is not reset; it is deleted"}},
}

// TestEveryKind runs every way against every kind of holder it reaches
// (docs/protocol.md, "Every kind of holder").
func TestEveryKind(t *testing.T) {
	for i, wy := range ways {
		for j, kd := range kinds {
			if wy.na[kd.name] != "" {
				continue
			}
			t.Run(wy.name+"/"+kd.name, func(t *testing.T) {
				wy.run(t, kd, fmt.Sprintf("w%dk%d", i, j), fmt.Sprintf("10.%d.%d", 100+i, j))
			})
		}
	}
}

// nodeDeletedWhileItsMachineRuns: kubectl delete node before the machine
// is powered off. The pool has one address; the machine of the deleted
// Node takes it off before the next node, waiting for an address, gets
// it. Where the kind waits for its machine (kind.pause), a machine that
// has not taken it off yet keeps it from everyone. The garbage collector
// deletes what the Node owned once it is gone.
func nodeDeletedWhileItsMachineRuns(t *testing.T, kd *kind, name, net string) {
	w, first, next, ip := fullPool(t, kd, name, net)

	var node corev1.Node
	Expect(k.Get(ctx, client.ObjectKey{Name: first}, &node)).To(Succeed())
	var resume func()
	if kd.pause != nil {
		resume = kd.pause(w, first)
	}
	Expect(k.Delete(ctx, &node)).To(Succeed())
	if resume != nil {
		w.keptFrom(next, first, ip, 2*grace) // past the departure hold and the quarantine period
		resume()
	}
	Eventually(func() (bool, error) {
		err := k.Get(ctx, client.ObjectKeyFromObject(&node), &corev1.Node{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		for _, dependents := range []client.ObjectList{&nncev1beta1.NodeNetworkConfigurationEnactmentList{}, &nncev1beta1.NodeNetworkStateList{}} {
			if err := envtest.CollectOrphans(ctx, k, node.UID, dependents); err != nil {
				return false, err
			}
		}
		return true, nil
	}).Should(BeTrue(), "the Node goes")
	Eventually(w.carried(first)).Should(BeEmpty(), "the machine of a deleted Node takes the pool's address off")
	Eventually(w.address(next)).Should(Equal(ip), "the address goes to the node that waits for one")
	Eventually(w.carried(next)).Should(Equal([]string{ip + "/24"}))
	Expect(w.carried(first)()).To(BeEmpty())
	w.invariants()
}

// deletedWith: what the admin wrote (a policy, a pooled policy, the
// claims) deleted with --cascade=foreground (the garbage collector deletes
// what it owns first) or --cascade=orphan (it takes their owner references
// off first). Every address leaves its NIC before it is free, and all of
// them are free in the end, quarantined by nobody; what was deleted goes.
func deletedWith(propagation metav1.DeletionPropagation) func(t *testing.T, kd *kind, name, net string) {
	return func(t *testing.T, kd *kind, name, net string) {
		w := newWorld(t, kd, name, net, 10, 20)
		for i := 1; i <= 2; i++ {
			kd.join(t, w, w.machine(i))
		}
		var held []string
		for _, m := range w.names() {
			held = append(held, w.settled(m))
		}
		freed := w.watchFreedWhileCarried(t)

		objects, dependents := kd.deletable(w)
		for _, o := range objects {
			Expect(k.Delete(ctx, o, client.PropagationPolicy(propagation))).To(Succeed())
		}
		Eventually(func() (bool, error) {
			all := true
			for _, o := range objects {
				gone, err := envtest.Collect(ctx, k, o, dependents)
				if err != nil {
					return false, err
				}
				all = all && gone
			}
			return all, nil
		}).Should(BeTrue(), "what was deleted goes")
		Eventually(w.bits).Should(BeEmpty(), "%v are free again", held)
		Expect(w.entries()).To(BeEmpty(), "no quarantine is left")
		Expect(must(w.holders.records())).To(BeEmpty(), "no holder records an address")
		if kd.nic {
			for _, m := range w.names() {
				Expect(w.carried(m)()).To(BeEmpty(), "%s: off the NIC", m)
			}
		}
		Expect(freed()).To(BeEmpty(), "no address is freed while a NIC carries it")
		w.invariants()
	}
}

// nodeThatNeverApplies: one node of three is not Ready and nothing of
// the kind's runs on it (its handler's pod is gone), under a rollout of
// one node at a time. The other two are configured, and once what the
// admin wrote is deleted, their addresses come off and are free: neither
// the rollout nor the releases wait for the node that cannot apply.
func nodeThatNeverApplies(t *testing.T, kd *kind, name, net string) {
	one := intstr.FromInt32(1)
	w := newWorld(t, kd, name, net, 10, 20, func(w *world) { w.maxUnavailable = &one })
	kd.join(t, w, w.machine(1))
	kd.dead(t, w, w.machine(2))
	kd.join(t, w, w.machine(3))
	configured := []string{w.settled(w.machine(1)), w.settled(w.machine(3))}

	objects, _ := kd.deletable(w)
	for _, o := range objects {
		Expect(k.Delete(ctx, o)).To(Succeed())
	}
	for _, m := range []string{w.machine(1), w.machine(3)} {
		Eventually(w.carried(m)).Should(BeEmpty(), "%s: its address comes off", m)
	}
	for _, ip := range configured {
		Eventually(w.bits).ShouldNot(ContainElement(ip), "%s is free", ip)
	}
	w.invariants()
}

// releaseThatFailed: a node no longer selected whose machine fails to
// take its address off (NetworkManager does not answer). The pool has one
// address, and a node waits for it: past the quarantine period, the
// address is kept from everyone while the machine carries it, and the
// removal is tried again until the machine applies it; only then does the
// waiting node get it.
func releaseThatFailed(t *testing.T, kd *kind, name, net string) {
	w, first, next, ip := fullPool(t, kd, name, net)

	kd.fail(w, first, true)
	relabel(first, "elsewhere")
	Eventually(w.entries).Should(ContainElement(ip), "released: quarantined")
	w.keptFrom(next, first, ip, 2*grace) // past the quarantine period

	kd.fail(w, first, false)
	Eventually(w.carried(first)).Should(BeEmpty(), "the removal is tried again")
	Eventually(w.address(next)).Should(Equal(ip), "the address goes to the node that waits for one")
	Eventually(w.carried(next)).Should(Equal([]string{ip + "/24"}))
	w.invariants()
}

// fullPool starts a world whose pool has one address, held by its first
// machine, and a next machine waiting for one.
func fullPool(t *testing.T, kd *kind, name, net string) (w *world, first, next, ip string) {
	w = newWorld(t, kd, name, net, 10, 10)
	first, next = w.machine(1), w.machine(2)
	kd.join(t, w, first)
	ip = w.settled(first)
	kd.join(t, w, next)
	Eventually(func() (bool, error) { return kd.waits(w, next) }).Should(BeTrue(), "%s waits for an address", next)
	Expect(w.address(next)()).To(BeEmpty())
	return w, first, next, ip
}

// keptFrom checks, for d, that ip stays on machine carrier's NIC alone
// and set in the bitmap, and that machine waiting does not get it.
func (w *world) keptFrom(waiting, carrier, ip string, d time.Duration) {
	Consistently(func() ([]string, error) {
		if a := must(w.address(waiting)()); a != "" {
			return nil, fmt.Errorf("%s got %s", waiting, a)
		}
		return w.carried(carrier)(), nil
	}, d).Should(Equal([]string{ip + "/24"}), "kept from everyone while %s carries it", carrier)
	Expect(must(w.bits())).To(ContainElement(ip))
}

// relabel sets the role label of node's Node.
func relabel(node, role string) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		n.Labels["role"] = role
		return k.Update(ctx, &n)
	})).To(Succeed())
}

// addressOutsideRange: the pool deleted and created again over another
// range. A holder whose address goes on a NIC gets one of the new range,
// and its NIC carries that one alone, with the new range's prefix; a
// claim keeps its address (an IPAddress never changes; its machine carries
// it). The pool says, either way, which addresses it no longer hands out.
func addressOutsideRange(t *testing.T, kd *kind, name, net string) {
	w := newWorld(t, kd, name, net, 10, 20)
	for i := 1; i <= 2; i++ {
		kd.join(t, w, w.machine(i))
	}
	old := map[string]string{}
	for _, m := range w.names() {
		old[m] = w.settled(m)
	}

	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: w.pool}}
	Expect(k.Delete(ctx, pool)).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k.Get(ctx, client.ObjectKeyFromObject(pool), pool)) }).Should(BeTrue())
	moved := otherNet(net)
	w.createPool(t, moved, 10, 20)

	for _, m := range w.names() {
		Eventually(w.poolEvents).Should(ContainElement(And(HavePrefix(ippoolv1.ReasonAddressOutsideRange+": "),
			ContainSubstring(old[m]+" "))), "the pool names %s's address", m)
		if !kd.nic {
			Consistently(w.address(m), 2*grace).Should(Equal(old[m]), "%s keeps its address", m)
			continue
		}
		Eventually(w.address(m)).Should(HavePrefix(moved+"."), "%s gets an address of the new range", m)
		renewed := must(w.address(m)())
		Eventually(w.carried(m)).Should(Equal([]string{renewed + "/24"}), "%s carries the new address alone", m)
	}
	w.invariants()
}

// reset: the reset annotation on one node's holder. Make before break:
// the node gets a new address, which replaces the old one on its NIC
// without a moment between them, and it is not handed the one it gives
// back, then or once that is free.
func reset(t *testing.T, kd *kind, name, net string) {
	w := newWorld(t, kd, name, net, 10, 20)
	for i := 1; i <= 2; i++ {
		kd.join(t, w, w.machine(i))
	}
	other, m := w.machine(1), w.machine(2)
	kept, old := w.settled(other), w.settled(m)
	w.nics.MustCarryIn(m, netip.MustParsePrefix(net+".0/24"))

	kd.reset(w, m)
	Eventually(w.address(m)).ShouldNot(Or(BeEmpty(), Equal(old)), "a new address")
	renewed := must(w.address(m)())
	Eventually(w.carried(m)).Should(Equal([]string{renewed + "/24"}), "the new address replaces the old one")
	Eventually(w.bits).ShouldNot(ContainElement(old), "the old address is free once the node shows it gone")
	Consistently(func() ([]string, error) {
		held, err := w.held(m)()
		return append(held, w.carried(m)()...), err
	}, 3*time.Second).Should(Equal([]string{renewed, renewed + "/24"}), "one reset, one new address: never the one it gave back")
	Expect(w.address(other)()).To(Equal(kept), "the other node keeps its address")
	Expect(w.nics.WithoutAddress()).To(BeEmpty(), "the node was never without an address of the pool")
	w.invariants()
}

// otherNet returns another /24 than net's, in the same /16: 10.x.y gives
// 10.x.(y+50).
func otherNet(net string) string {
	i := strings.LastIndex(net, ".")
	y, err := strconv.Atoi(net[i+1:])
	Expect(err).NotTo(HaveOccurred())
	return fmt.Sprintf("%s.%d", net[:i], y+50)
}

// watchFreedWhileCarried samples, until the test ends, the pool's bitmap
// between two reads of the NICs, and returns what it saw freed while a
// NIC carried it in both reads.
func (w *world) watchFreedWhileCarried(t *testing.T) func() []string {
	var (
		mu   sync.Mutex
		seen []string
	)
	carriedNow := func() map[string]string {
		out := map[string]string{}
		for _, m := range w.names() {
			for _, a := range w.carried(m)() {
				out[strings.Split(a, "/")[0]] = m
			}
		}
		return out
	}
	envtest.Every(t, 50*time.Millisecond, func() {
		before, bits, err := carriedNow(), []string(nil), error(nil)
		if bits, err = w.bits(); err != nil {
			return
		}
		after := carriedNow()
		mu.Lock()
		defer mu.Unlock()
		for ip, m := range before {
			if after[ip] == m && !slices.Contains(bits, ip) {
				seen = append(seen, fmt.Sprintf("%s free while %s carried it", ip, m))
			}
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
