package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

// fault is one kind of trouble; run reports whether it happened.
type fault struct {
	name string
	run  func(c *cluster, rng *rand.Rand) bool
}

// The faults both suites inject.
var (
	claimReplaced  = fault{"claim deleted, another created", func(c *cluster, rng *rand.Rand) bool { return c.replaceClaim(rng) }}
	addressDeleted = fault{"claim's IPAddress deleted", func(c *cluster, rng *rand.Rand) bool { return c.deleteAddress(rng) }}
	handlerKilled  = fault{"handler kill -9 and restart", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.try("node", "restart", node, "--crash")
	}}
	controllerKilled = fault{"leading pool controller kill -9 (of two)", func(c *cluster, _ *rand.Rand) bool {
		return c.try("controller", "restart", "--crash")
	}}
	crashRemoved = fault{"node crash-removed, another joins", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.try("node", "remove", node, "--crash") {
			return false
		}
		c.next++
		return c.try("node", "add", fmt.Sprintf("node%02d", c.next))
	}}
	apiServerKilled = fault{"API server kill -9 and restart", func(c *cluster, _ *rand.Rand) bool {
		return c.try("apiserver", "restart", "--crash")
	}}
	deselected = fault{"node deselected by its labels for a while", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.setWorker(node, false) {
			return false
		}
		return c.later("select/"+node, time.Now().Add(time.Duration(2000+rng.IntN(8000))*time.Millisecond),
			func() bool { return c.setWorker(node, true) })
	}}
	orphaned       = fault{"Node deleted while its handler runs, registered again later", func(c *cluster, rng *rand.Rand) bool { return c.orphan(rng) }}
	machineStopped = fault{"machine stopped for a while (NotReady)", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.try("node", "stop", node) {
			return false
		}
		return c.later("start/"+node, time.Now().Add(time.Duration(3000+rng.IntN(10000))*time.Millisecond),
			func() bool { return c.try("node", "start", node) })
	}}
	pooledReset = fault{"reset of a node's generated policy", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.annotate(&nmstatev1.NodeNetworkConfigurationPolicy{}, ippoolv1.NodePolicyName(pooled, node), pool4)
	}}
	generatedDeleted = fault{"a node's generated policy deleted by hand", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		g := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: ippoolv1.NodePolicyName(pooled, node)}}
		return node != "" && c.k.Delete(c.ctx, g) == nil
	}}
	pooledReplaced = fault{"pooled policy deleted (background, foreground or orphan), created again once gone", func(c *cluster, rng *rand.Rand) bool {
		return c.replacePooled(rng)
	}}
)

var faults = []fault{
	claimReplaced,
	addressDeleted,
	handlerKilled,
	{"handler stalled past the grace period", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.try("node", "stall", node) {
			return false
		}
		return c.later("resume/"+node, time.Now().Add(grace+time.Duration(rng.IntN(5000))*time.Millisecond),
			func() bool { return c.try("node", "resume", node) })
	}},
	controllerKilled,
	crashRemoved,
	{"node replaced under the same name", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.try("node", "remove", node, "--crash") && c.try("node", "add", node)
	}},
	{"reset of an enactment", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{}, node+"."+policy, []string{pool4, pool6}[rng.IntN(2)])
	}},
	{"reset of the policy", func(c *cluster, rng *rand.Rand) bool {
		return c.annotate(&nmstatev1.NodeNetworkConfigurationPolicy{}, policy, []string{pool4, pool6}[rng.IntN(2)])
	}},
	{"reset of a pool", func(c *cluster, rng *rand.Rand) bool {
		return c.annotate(&ippoolv1.NodeIPPool{}, []string{pool4, pool6}[rng.IntN(2)], "")
	}},
	apiServerKilled,
	{"pool re-created larger or smaller", func(c *cluster, rng *rand.Rand) bool {
		r := []ippoolv1.IPRange{{CIDR: "10.90.0.0/23"}, {CIDR: "10.90.0.0/24", End: "10.90.0.120"}}[rng.IntN(2)]
		return c.deletePool(pool4) && c.createPool(pool4, r)
	}},
	{"overlapping pool added, the older deleted", func(c *cluster, _ *rand.Rand) bool {
		// chaos-v4 is in use; a wider pool overlaps it and is refused until
		// chaos-v4 is deleted, then serves; chaos-v4 comes back, refused in
		// turn, and serves again once the wider pool is deleted.
		const wider = "chaos-v4-wider"
		return c.createPool(wider, ippoolv1.IPRange{CIDR: "10.90.0.0/23"}) && c.deletePool(pool4) &&
			c.poolAvailable(wider) && c.createPool(pool4, ippoolv1.IPRange{CIDR: "10.90.0.0/24"}) &&
			c.deletePool(wider) && c.poolAvailable(pool4)
	}},
	{"policy deleted, created again a moment later", func(c *cluster, rng *rand.Rand) bool {
		return c.replacePolicy(nil, rng)
	}},
	{"policy created again without its IPv6 capture for a while", func(c *cluster, rng *rand.Rand) bool {
		return c.replacePolicy(chaosPolicy(false), rng)
	}},
	deselected,
	{"handler killed between apply and commit", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.crashMidApply(node)
	}},
	{"pool deleted and created again, twice in a row", func(c *cluster, rng *rand.Rand) bool {
		name := []string{pool4, pool6}[rng.IntN(2)]
		cidr := map[string]string{pool4: "10.90.0.0/24", pool6: "fd00:90::/64"}[name]
		for range 2 {
			if !c.deletePool(name) || !c.createPool(name, ippoolv1.IPRange{CIDR: cidr}) {
				return false
			}
		}
		return true
	}},
	orphaned,
	machineStopped,
	pooledReset,
	generatedDeleted,
	pooledReplaced,
	{"bitmap emptied by hand", func(c *cluster, rng *rand.Rand) bool {
		var p ippoolv1.NodeIPPool
		if err := c.k.Get(c.ctx, types.NamespacedName{Name: []string{pool4, pool6}[rng.IntN(2)]}, &p); err != nil {
			return false
		}
		p.Status.AllocatedOffsets = ""
		return c.k.Status().Update(c.ctx, &p) == nil
	}},
}

// try runs localcluster and reports whether it succeeded; a fault that
// meets another (a node removed while its enactments are retired) is
// skipped, not a failure.
func (c *cluster) try(args ...string) bool {
	cmd := exec.Command(filepath.Join(c.bin, "localcluster"), append(args, "--dir", c.dir)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Logf("localcluster %v: %v: %s", args, err, out)
		c.logTail(string(out))
	}
	return err == nil
}

// seeLog finds the log a localcluster error names ("see /path.log").
var seeLog = regexp.MustCompile(`see (/\S+\.log)`)

// logTail prints the last lines of the log an error names: the cluster's
// directory is gone once a passing run ends.
func (c *cluster) logTail(out string) {
	m := seeLog.FindStringSubmatch(out)
	if m == nil {
		return
	}
	raw, err := os.ReadFile(m[1])
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	c.t.Logf("the last lines of %s:\n%s", m[1], strings.Join(lines[max(0, len(lines)-15):], "\n"))
}

// createPool creates a pool.
func (c *cluster) createPool(name string, r ippoolv1.IPRange) bool {
	err := c.k.Create(c.ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}})
	if err != nil {
		c.t.Logf("create pool %s: %v", name, err)
	}
	return err == nil
}

// deletePool deletes a pool and waits until it is gone: a pool goes once
// nothing is in flight and every quarantine was lifted on its holder's
// evidence, which a stalled or crashed handler delays.
func (c *cluster) deletePool(name string) bool {
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.k.Delete(c.ctx, p); client.IgnoreNotFound(err) != nil {
		return false
	}
	return poll(2*time.Minute, func() bool { return apierrors.IsNotFound(c.k.Get(c.ctx, client.ObjectKeyFromObject(p), p)) })
}

// restorePools puts the pools back as the policy needs them once the
// faults are over: the wider pool gone, the IPv4 and IPv6 pools there (a
// fault that stopped halfway may have left one deleted).
func (c *cluster) restorePools() bool {
	if !c.deletePool("chaos-v4-wider") {
		return false
	}
	for name, cidr := range map[string]string{pool4: "10.90.0.0/24", pool6: "fd00:90::/64"} {
		var p ippoolv1.NodeIPPool
		err := c.k.Get(c.ctx, types.NamespacedName{Name: name}, &p)
		if err == nil && p.DeletionTimestamp.IsZero() {
			continue
		}
		if (err == nil && !c.deletePool(name)) || !c.createPool(name, ippoolv1.IPRange{CIDR: cidr}) {
			return false
		}
	}
	return true
}

// poolAvailable waits until a pool is Available=True.
func (c *cluster) poolAvailable(name string) bool {
	return poll(time.Minute, func() bool {
		var p ippoolv1.NodeIPPool
		if c.k.Get(c.ctx, types.NamespacedName{Name: name}, &p) != nil {
			return false
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, ippoolv1.ConditionAvailable)
	})
}

// poll calls cond every 200ms until it holds or timeout passes.
func poll(timeout time.Duration, cond func() bool) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// annotate sets the reset annotation on an object.
func (c *cluster) annotate(o client.Object, name, value string) bool {
	if err := c.k.Get(c.ctx, types.NamespacedName{Name: name}, o); err != nil {
		return false
	}
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[ippoolv1.ResetIPPoolAnnotation] = value
	o.SetAnnotations(a)
	return c.k.Patch(c.ctx, o, patch) == nil
}

func describe(faults []fault, counts map[string]int) string {
	var parts []string
	for _, f := range faults {
		parts = append(parts, fmt.Sprintf("%s: %d", f.name, counts[f.name]))
	}
	return strings.Join(parts, "; ")
}

// replacePolicy deletes the policy and creates next in its place (the
// same policy when next is nil) at once; a variant is replaced by the
// full policy again a few seconds later. Captures are immutable: a policy
// drops one by being created again.
func (c *cluster) replacePolicy(next *nmstatev1.NodeNetworkConfigurationPolicy, rng *rand.Rand) bool {
	if _, ok := c.undo["policy/"]; ok {
		return false
	}
	full := next == nil
	if full {
		next = chaosPolicy(true)
	}
	if !c.recreatePolicy(next) {
		return false
	}
	if full {
		return true
	}
	return c.later("policy/", time.Now().Add(time.Duration(3000+rng.IntN(7000))*time.Millisecond),
		func() bool { return c.recreatePolicy(chaosPolicy(true)) })
}

// recreatePolicy deletes the policy, waits until it is gone, and creates p.
func (c *cluster) recreatePolicy(p *nmstatev1.NodeNetworkConfigurationPolicy) bool {
	old := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy}}
	if err := c.k.Delete(c.ctx, old); client.IgnoreNotFound(err) != nil {
		return false
	}
	if !poll(30*time.Second, func() bool { return apierrors.IsNotFound(c.k.Get(c.ctx, client.ObjectKeyFromObject(old), old)) }) {
		return false
	}
	return poll(30*time.Second, func() bool { return c.k.Create(c.ctx, p.DeepCopy()) == nil })
}

// setWorker adds or removes a node's worker role label, which the policy
// selects.
func (c *cluster) setWorker(node string, worker bool) bool {
	var n corev1.Node
	if err := c.k.Get(c.ctx, types.NamespacedName{Name: node}, &n); err != nil {
		return apierrors.IsNotFound(err) // removed meanwhile: nothing to restore
	}
	patch := client.MergeFrom(n.DeepCopy())
	if worker {
		n.Labels["node-role.kubernetes.io/worker"] = ""
	} else {
		delete(n.Labels, "node-role.kubernetes.io/worker")
	}
	return c.k.Patch(c.ctx, &n, patch) == nil
}

// orphan deletes a node's Node while its machine runs (its handler, and
// its network), as an admin who deletes the Node before powering the
// machine off, and registers it again a few seconds later.
func (c *cluster) orphan(rng *rand.Rand) bool {
	node := c.pick(rng)
	if node == "" || c.k.Delete(c.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) != nil {
		return false
	}
	c.orphans.add(node)
	return c.later("register/"+node, time.Now().Add(time.Duration(3000+rng.IntN(7000))*time.Millisecond),
		func() bool { return c.register(node) })
}

// register creates a node's Node again, Ready, as its kubelet would after
// the Node was deleted while the machine ran; not while the deleted Node
// is still there (companion mode holds it until the addresses are off).
func (c *cluster) register(node string) bool {
	var old corev1.Node
	if err := c.k.Get(c.ctx, types.NamespacedName{Name: node}, &old); err == nil && old.DeletionTimestamp != nil {
		return false
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node,
		"kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""}}}
	if err := c.k.Create(c.ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
		return false
	}
	// A patch: the local cluster's kubelets process may have marked it
	// Ready already.
	patch := client.MergeFrom(n.DeepCopy())
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "registered again", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if c.k.Status().Patch(c.ctx, n, patch) != nil {
		return false
	}
	c.orphans.remove(node)
	return true
}

// crashMidApply stalls a node's handler, resets its enactment's IPv4
// record (the address is released), leaves an apply that takes the node's
// addresses off uncommitted, and kills the handler: as if it died between
// apply and commit while it took a released address off. The restarted
// handler must roll the checkpoint back before it publishes a state, or
// the release would look done while nmstate's own rollback would bring
// the address back.
func (c *cluster) crashMidApply(node string) bool {
	if !c.try("node", "stall", node) {
		return false
	}
	defer c.try("node", "resume", node)
	if !c.annotate(&nncev1beta1.NodeNetworkConfigurationEnactment{}, node+"."+policy, pool4) {
		return false
	}
	state := filepath.Join(c.dir, "nodes", node+".yaml")
	current, err := os.ReadFile(state)
	if err != nil {
		return false
	}
	var ips []netip.Addr
	for ip, iface := range netstate.Carriers(current) {
		if iface == "eth1" || iface == "eth2" {
			ips = append(ips, ip)
		}
	}
	desired, _, err := netstate.WithoutAddresses(current, ips)
	if err != nil || desired == nil {
		return false
	}
	sim := nmstatectl.Runner{Path: filepath.Join(c.bin, "nmstatectl-sim"), Env: []string{"NMSTATECTL_SIM_STATE=" + state}}
	if sim.Apply(c.ctx, desired) != nil {
		return false
	}
	return c.try("node", "restart", node, "--crash")
}

// anyPropagation is one of the deletions users ask for: kubectl's
// default (background), --cascade=foreground, --cascade=orphan.
func anyPropagation(rng *rand.Rand) metav1.DeletionPropagation {
	return []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground,
		metav1.DeletePropagationOrphan}[rng.IntN(3)]
}
