package peerbench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

type meter struct {
	b     *testing.B
	k     client.WithWatch
	cfg   *rest.Config
	dir   string
	nodes int
	// floorPID is the floor process's.
	floorPID string
}

// rollouts rolls a case out -peer.runs times, each a new policy that
// changes every node's network, and measures them.
func (m *meter) rollouts(c rolloutCase, index int) figures {
	ctx := context.Background()
	if c.pooled && !c.perNode {
		must(m.b, m.k.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", index)},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: fmt.Sprintf("10.%d.0.0/16", 128+index)}}}))
	}
	var times []time.Duration
	var f figures
	for run := range *runs {
		name := fmt.Sprintf("bench-%d-%d", index, run)
		before := m.snapshot()
		prof := m.profileRollout(c.name, run)
		var elapsed time.Duration
		switch {
		case c.perNode:
			elapsed = m.perNode(name, index, run)
		case c.companion:
			elapsed = m.companion(name, index, run)
		default:
			elapsed = m.policy(c, name, index, run)
		}
		times = append(times, elapsed)
		fmt.Printf("%d nodes, %s, run %d: %.2fs\n", m.nodes, c.name, run+1, elapsed.Seconds())
		after := m.snapshot()
		prof.wait()
		f.requests += (after.requests - before.requests) / float64(m.nodes)
		f.watchEvents += (after.watchEvents - before.watchEvents) / float64(m.nodes)
		f.writes += after.writes - before.writes
		f.writesBy = addDiff(f.writesBy, after.writesBy, before.writesBy)
		f.readsBy = addDiff(f.readsBy, after.readsBy, before.readsBy)
		f.cpu += (after.handlerCPU - before.handlerCPU) / time.Duration(m.nodes)
		f.apiServerCPUPerRollout += after.apiServerCPU - before.apiServerCPU
		f.poolControllerCPU += after.poolControllerCPU - before.poolControllerCPU
		m.cleanUp(c, name)
		if c.pooled && !c.perNode {
			m.waitReleased(fmt.Sprintf("bench-%d", index))
		}
	}
	r := float64(*runs)
	f.requests, f.watchEvents, f.writes = f.requests/r, f.watchEvents/r, f.writes/r
	for k := range f.writesBy {
		f.writesBy[k] /= r
	}
	for k := range f.readsBy {
		f.readsBy[k] /= r
	}
	f.cpu /= time.Duration(*runs)
	f.apiServerCPUPerRollout /= time.Duration(*runs)
	f.poolControllerCPU /= time.Duration(*runs)
	slices.Sort(times)
	f.rollout = times[len(times)/2]
	last := m.snapshot()
	f.rssPerNode = float64(last.handlerRSS) / float64(m.nodes)
	f.anonPerNode = float64(last.handlerAnon) / float64(m.nodes)
	f.poolControllerRSS = float64(last.poolControllerRSS)
	f.floorRSS, f.floorAnon = float64(envtest.ProcRSS(m.floorPID)), float64(envtest.ProcRSSAnon(m.floorPID))
	f.floor = m.floor(int(f.writes))
	f.rolloutsMeasured, f.nodes = *runs, m.nodes
	return f
}

// desiredState is the desired state of a case's run: eth1's MTU, and,
// pooled, an address on eth2 (addr, or the capture's).
func desiredState(index, run int, addr string) string {
	desired := fmt.Sprintf("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  mtu: %d\n", 1300+10*index+run)
	if addr == "" {
		return desired
	}
	return desired + "- name: eth2\n  type: ethernet\n  state: up\n  ipv4:\n    enabled: true\n    dhcp: false\n" +
		"    address:\n    - ip: \"" + addr + "\"\n      prefix-length: \"{{ capture.addr.prefix-length }}\"\n"
}

// policy rolls out one policy for every node and returns how long it
// took to be Available on all.
func (m *meter) policy(c rolloutCase, name string, index, run int) time.Duration {
	ctx := context.Background()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	if c.maxUnavailable != "" {
		v := intstr.FromString(c.maxUnavailable)
		p.Spec.MaxUnavailable = &v
	}
	addr := ""
	if c.pooled {
		p.Spec.Capture = map[string]string{"addr": fmt.Sprintf("ippool.bench-%d.allocate", index)}
		addr = "{{ capture.addr.ip }}"
	}
	p.Spec.DesiredState = shared.NewState(desiredState(index, run, addr))
	limit, err := policystatus.MaxUnavailable(p.Spec.MaxUnavailable, m.nodes)
	must(m.b, err)
	rw := m.watchRollout(name, limit)
	start := time.Now()
	if rw != nil {
		rw.start = start
	}
	must(m.b, m.k.Create(ctx, p))
	m.waitAvailable(name, m.nodes)
	elapsed := time.Since(start)
	rw.report(name)
	return elapsed
}

// perNode rolls out one policy per node with its address typed in, as
// admins do for kubernetes-nmstate's handler today, all at once, and
// returns how long until every one is Available.
func (m *meter) perNode(name string, index, run int) time.Duration {
	ctx := context.Background()
	nodes := m.nodeNames()
	start := time.Now()
	for i, node := range nodes {
		p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + node}}
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		state := strings.Replace(desiredState(index, run, fmt.Sprintf("10.%d.%d.%d", 128+index, i/250, 1+i%250)),
			"\"{{ capture.addr.prefix-length }}\"", "16", 1)
		p.Spec.DesiredState = shared.NewState(state)
		must(m.b, m.k.Create(ctx, p))
	}
	for _, node := range nodes {
		m.waitAvailable(name+"-"+node, 1)
	}
	return time.Since(start)
}

// companion rolls out a pooled policy of companion mode and returns how
// long until its status says every node is configured.
func (m *meter) companion(name string, index, run int) time.Duration {
	ctx := context.Background()
	p := &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	p.Spec.Capture = map[string]string{"addr": fmt.Sprintf("ippool.bench-%d.allocate", index)}
	p.Spec.DesiredState = shared.NewState(desiredState(index, run, "{{ capture.addr.ip }}"))
	start := time.Now()
	must(m.b, m.k.Create(ctx, p))
	want := fmt.Sprintf("%d/%d nodes successfully configured", m.nodes, m.nodes)
	waitFor(m.b, 60*time.Minute, "pooled policy "+name+" available", func() bool {
		var got ippoolv1.PooledNodeNetworkConfigurationPolicy
		if err := m.k.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return false
		}
		c := got.Status.Conditions.Find(shared.NodeNetworkConfigurationPolicyConditionAvailable)
		return c != nil && c.Status == corev1.ConditionTrue && c.Message == want
	})
	return time.Since(start)
}

// nodeNames lists the cluster's nodes.
func (m *meter) nodeNames() []string {
	var list corev1.NodeList
	must(m.b, m.k.List(context.Background(), &list))
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// cleanUp deletes a run's policies and waits until they and their
// enactments are gone (a pooled policy of companion mode takes its
// addresses off the nodes first).
func (m *meter) cleanUp(c rolloutCase, name string) {
	ctx := context.Background()
	switch {
	case c.companion:
		must(m.b, m.k.Delete(ctx, &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		waitFor(m.b, 60*time.Minute, "pooled policy "+name+" gone", func() bool {
			var list nmstatev1.NodeNetworkConfigurationPolicyList
			err := m.k.Get(ctx, client.ObjectKey{Name: name}, &ippoolv1.PooledNodeNetworkConfigurationPolicy{})
			return client.IgnoreNotFound(err) == nil && err != nil &&
				m.k.List(ctx, &list, client.MatchingLabels{ippoolv1.PooledPolicyLabel: name}) == nil && len(list.Items) == 0
		})
		m.waitNoEnactments()
	case c.perNode:
		for _, node := range m.nodeNames() {
			must(m.b, client.IgnoreNotFound(m.k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + node}})))
		}
		m.waitNoEnactments()
	default:
		must(m.b, m.k.Delete(ctx, &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		m.waitGone(name)
	}
}

// waitReleased waits until a pool has taken back every address of the
// policies deleted: nothing quarantined (each node published a state
// without its address) or in flight, so that a release's writes are not
// counted in the next rollout.
func (m *meter) waitReleased(pool string) {
	waitFor(m.b, 30*time.Minute, "pool "+pool+" released", func() bool {
		var p ippoolv1.NodeIPPool
		return m.k.Get(context.Background(), client.ObjectKey{Name: pool}, &p) == nil &&
			len(p.Status.Quarantined) == 0 && len(p.Status.InFlight) == 0
	})
}

// waitNoEnactments waits until no enactment is left.
func (m *meter) waitNoEnactments() {
	waitFor(m.b, 30*time.Minute, "every enactment gone", func() bool {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		return m.k.List(context.Background(), &list) == nil && len(list.Items) == 0
	})
}

// waitAvailable waits until a policy is Available on its n nodes.
func (m *meter) waitAvailable(name string, n int) {
	want := fmt.Sprintf("%d/%d nodes successfully configured", n, n)
	waitFor(m.b, 30*time.Minute, "policy "+name+" available", func() bool {
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := m.k.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
			return false
		}
		c := p.Status.Conditions.Find(shared.NodeNetworkConfigurationPolicyConditionAvailable)
		return c != nil && c.Status == corev1.ConditionTrue && c.Message == want
	})
}

// waitGone waits until a deleted policy's enactments are gone.
func (m *meter) waitGone(name string) {
	waitFor(m.b, 10*time.Minute, "enactments of "+name+" gone", func() bool {
		var list nncev1beta1.NodeNetworkConfigurationEnactmentList
		err := m.k.List(context.Background(), &list, client.MatchingLabels{shared.EnactmentPolicyLabel: name})
		return err == nil && len(list.Items) == 0
	})
}

func waitFor(b *testing.B, limit time.Duration, what string, done func() bool) {
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
