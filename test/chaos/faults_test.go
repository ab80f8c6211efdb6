package chaos

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// fault is one kind of trouble; run reports whether it happened.
type fault struct {
	name string
	run  func(c *cluster, rng *rand.Rand) bool
}

var faults = []fault{
	{"handler kill -9 and restart", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		return node != "" && c.try("node", "restart", node, "--crash")
	}},
	{"handler stalled past the grace period", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.try("node", "stall", node) {
			return false
		}
		c.stalled[node] = time.Now().Add(grace + time.Duration(rng.IntN(5000))*time.Millisecond)
		return true
	}},
	{"leading pool controller kill -9 (of two)", func(c *cluster, _ *rand.Rand) bool {
		return c.try("controller", "restart", "--crash")
	}},
	{"node crash-removed, another joins", func(c *cluster, rng *rand.Rand) bool {
		node := c.pick(rng)
		if node == "" || !c.try("node", "remove", node, "--crash") {
			return false
		}
		c.next++
		return c.try("node", "add", fmt.Sprintf("node%02d", c.next))
	}},
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
	{"API server kill -9 and restart", func(c *cluster, _ *rand.Rand) bool {
		return c.try("apiserver", "restart", "--crash")
	}},
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
	}
	return err == nil
}

// createPool creates a pool.
func (c *cluster) createPool(name string, r ippoolv1.IPRange) bool {
	err := c.k.Create(c.ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}})
	if err != nil {
		c.t.Logf("create pool %s: %v", name, err)
	}
	return err == nil
}

// deletePool deletes a pool and waits until it is gone.
func (c *cluster) deletePool(name string) bool {
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.k.Delete(c.ctx, p); err != nil {
		return false
	}
	return poll(30*time.Second, func() bool { return apierrors.IsNotFound(c.k.Get(c.ctx, client.ObjectKeyFromObject(p), p)) })
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

func describe(counts map[string]int) string {
	var parts []string
	for _, f := range faults {
		parts = append(parts, fmt.Sprintf("%s: %d", f.name, counts[f.name]))
	}
	return strings.Join(parts, "; ")
}
