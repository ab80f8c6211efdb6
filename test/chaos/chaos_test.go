// Package chaos runs a local cluster of real processes (etcd,
// kube-apiserver, two pool controller replicas with leader election, one
// handler per node) under seeded
// random faults, samples every node's network all along, and fails on any
// address carried by two NICs at once, or carried by a NIC while a
// Cluster API claim of the same pool holds it. Every kind of holder draws
// from one pool at once: an NNCP's enactments, a pooled policy's nodes and
// Cluster API claims. After the faults, every node must hold its addresses
// within two minutes and the pools must agree with their holders.
// TestChaosCompanion does the same in companion mode, beside
// kubernetes-nmstate's handler, with a pooled policy and claims sharing a
// pool (an NNCP with ippool captures needs our handler).
//
// A short run of each is part of make test; make chaos runs long ones:
//
//	go test ./test/chaos/ -run TestChaos -chaos.duration 10m -chaos.nodes 20 [-chaos.seed N]
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

var (
	duration = flag.Duration("chaos.duration", 30*time.Second, "how long to inject faults")
	nodes    = flag.Int("chaos.nodes", 20, "how many nodes the cluster keeps")
	// companionNodes is smaller: kubernetes-nmstate's handler takes more
	// of the machine than ours.
	companionNodes = flag.Int("chaos.companion-nodes", 8, "how many nodes the companion-mode cluster keeps")
	seedFlag       = flag.Uint64("chaos.seed", 0, "the random seed; 0 picks one from the clock")
)

const (
	grace = 5 * time.Second
	// quarantine is short: a timer never frees a quarantined address, so
	// a short period only makes quarantines overdue (reported) sooner,
	// and rollouts gated by maxUnavailable outlast it.
	quarantine = 5 * time.Second
	policy     = "chaos"
	pool4      = "chaos-v4"
	pool6      = "chaos-v6"
	// skewedNodes run their handlers with clocks an hour off, one ahead
	// and one behind.
	skewedNodes = 2
	// claims Cluster API IPAddressClaims of chaos-v4, in claimsNamespace,
	// share the pool with the nodes all along.
	claims          = 6
	claimsNamespace = "chaos-claims"
)

// cluster is the local cluster under test.
type cluster struct {
	t        *testing.T
	bin, dir string
	k        client.Client
	ctx      context.Context
	// next numbers the nodes that join.
	next int
	// undo holds what faults do later (resume a stalled handler, put a
	// policy back, register a deleted Node again), by what it restores.
	undo map[string]*undo
	// orphans are nodes whose Node was deleted while their handler runs:
	// their machine, and its network, are still there. The samplers read
	// it while faults change it.
	orphans nodeSet
	// target names what the last fault hit, for the log.
	target string
	// claimsMade numbers the claims created.
	claimsMade int
	// patience is how long what the faults undo later may take once they
	// are over.
	patience time.Duration
	// pooledOn is the interface of the pooled policy's address.
	pooledOn string
}

// undo is something a fault does again later.
type undo struct {
	at time.Time
	do func() bool
}

func TestChaos(t *testing.T) {
	RegisterTestingT(t)
	SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (rerun with -chaos.seed %d), %d nodes, %s of faults", seed, seed, *nodes, *duration)
	c := start(t, seed, *nodes, true, "--node-grace-period", "10s")
	// A pooled policy deleted in the foreground goes once every node has
	// applied its removal, behind its maxUnavailable: minutes on a busy
	// machine.
	c.patience = 3 * time.Minute
	c.setUp()
	c.converged(3 * time.Minute)
	Eventually(c.pooledUnconverged, time.Minute).Should(BeEmpty())

	s := c.sample()
	last := c.inject(seed, faults)
	Expect(c.restorePools()).To(BeTrue(), "the pools the policy needs are back")
	converged := poll(2*time.Minute, func() bool { return len(c.unconverged()) == 0 && len(c.pooledUnconverged()) == 0 })
	duplicates, samples := s.stop()
	t.Logf("%d samples of every node's network", samples)
	Expect(duplicates).To(BeEmpty(), "an address was on two NICs at once (seed %d)", seed)
	if !converged {
		c.dumpStuck()
	}
	Expect(converged).To(BeTrue(), "every node holds its addresses within two minutes once the faults are undone (seed %d): %v %v",
		seed, c.unconverged(), c.pooledUnconverged())
	t.Logf("converged %s after the last fault", time.Since(last).Round(time.Second))
	Eventually(c.claimsServed, time.Minute).Should(Succeed(), "every claim has its address once the faults are undone (seed %d)", seed)
	Eventually(c.check, grace+quarantine+time.Minute).Should(Succeed(), "the pools agree with the enactments, no leak (seed %d)", seed)
	Eventually(func() []string { return c.quarantined(pool4, pool6) }, time.Minute).Should(BeEmpty(), "every quarantine is lifted on evidence once every node is up (seed %d)", seed)
	t.Logf("releases: %s", c.releases())
}

// inject runs seeded random faults for the duration, one every 0.5–2 s,
// then undoes what they undo later, and returns when the last fault was.
func (c *cluster) inject(seed uint64, faults []fault) time.Time {
	rng := rand.New(rand.NewPCG(seed, seed))
	counts := map[string]int{}
	for end := time.Now().Add(*duration); time.Now().Before(end); {
		c.undoDue(false)
		f := faults[rng.IntN(len(faults))]
		c.target = ""
		if f.run(c, rng) {
			counts[f.name]++
			c.t.Logf("%s %s %s", time.Now().Format(time.StampMilli), f.name, c.target)
		}
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
	}
	last := time.Now()
	c.undoDue(true)
	c.t.Logf("faults injected: %s; what they undo later undone %s after the last", describe(faults, counts), time.Since(last).Round(time.Second))
	return last
}

// start builds the commands and brings up a cluster of n nodes, ours
// (with skewed nodes, whose handlers' clocks are off) or as up's extra
// flags say.
func start(t *testing.T, seed uint64, n int, skewed bool, extra ...string) *cluster {
	root := t.TempDir()
	c := &cluster{t: t, bin: filepath.Join(root, "bin"), dir: filepath.Join(root, "cluster"), ctx: context.Background(),
		next: n + 1, patience: time.Minute, undo: map[string]*undo{}, orphans: nodeSet{m: map[string]bool{}}}
	Expect(envtest.BuildCommands(c.bin, "handler", "pool-controller", "nmstatectl-sim", "localcluster", "kubectl-nodeippool")).To(Succeed())
	args := []string{"up", "--nodes", fmt.Sprint(n), "--bin", c.bin, "--assets", envtest.AssetsDir(),
		"--gc-grace-period", grace.String(), "--quarantine-period", quarantine.String(), "--controllers", "2"}
	args = append(args, extra...)
	crds, err := envtest.ClusterAPICRDFiles()
	Expect(err).NotTo(HaveOccurred())
	for _, crd := range crds {
		args = append(args, "--crd", crd)
	}
	c.run(args...)
	t.Cleanup(func() {
		c.undoing(true)
		if t.Failed() {
			t.Logf("the cluster's logs are in %s", filepath.Join(c.dir, "logs"))
			logs := filepath.Join(os.TempDir(), fmt.Sprintf("chaos-logs-%d", seed))
			_ = os.RemoveAll(logs)
			_ = exec.Command("cp", "-r", filepath.Join(c.dir, "logs"), logs).Run()
			t.Logf("copied them to %s", logs)
		}
		c.run("down")
	})
	c.k, err = envtest.LocalClusterClient(c.dir)
	Expect(err).NotTo(HaveOccurred())
	if skewed {
		for i := range skewedNodes {
			c.next++
			offset := []string{"1h", "-1h"}[i%2]
			c.run("node", "add", fmt.Sprintf("node%02d", c.next), "--clock-offset", offset)
		}
	}
	return c
}

// run runs localcluster on the cluster and returns its output.
func (c *cluster) run(args ...string) string {
	cmd := exec.Command(filepath.Join(c.bin, "localcluster"), append(args, "--dir", c.dir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	Expect(cmd.Run()).To(Succeed(), "localcluster %v:\n%s", args, out.String())
	return out.String()
}

// setUp creates an IPv4 and an IPv6 pool, a policy drawing from both for
// every node on eth1, and a pooled policy drawing from the IPv4 one for
// every node on eth2.
func (c *cluster) setUp() {
	for name, cidr := range map[string]string{pool4: "10.90.0.0/24", pool6: "fd00:90::/64"} {
		Expect(c.k.Create(c.ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: cidr}}})).To(Succeed())
	}
	Expect(c.k.Create(c.ctx, chaosPolicy(true))).To(Succeed())
	c.pooledOn = "eth2"
	Expect(c.k.Create(c.ctx, pooledPolicy(c.pooledOn))).To(Succeed())
	Expect(c.k.Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: claimsNamespace}})).To(Succeed())
	for range claims {
		Expect(c.createClaim()).To(BeTrue())
	}
}

// v4OnlyState is TwoFamiliesState without its IPv6 part.
const v4OnlyState = `interfaces:
- name: eth1
  type: ethernet
  state: up
  ipv4:
    enabled: true
    dhcp: false
    address:
    - ip: "{{ capture.v4.ip }}"
      prefix-length: "{{ capture.v4.prefix-length }}"
`

// chaosPolicy is the policy of every node: with both captures, or with
// the IPv4 one only. It applies to two nodes at a time, so that a rollout
// to every node lasts longer than the quarantine period.
func chaosPolicy(both bool) *nmstatev1.NodeNetworkConfigurationPolicy {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	two := intstr.FromInt32(2)
	p.Spec.MaxUnavailable = &two
	p.Spec.Capture = map[string]string{"v4": "ippool." + pool4 + ".allocate"}
	p.Spec.DesiredState = shared.NewState(v4OnlyState)
	if both {
		p.Spec.Capture["v6"] = "ippool." + pool6 + ".allocate"
		p.Spec.DesiredState = shared.NewState(envtest.TwoFamiliesState)
	}
	return p
}

// nodeNames lists the Nodes.
func (c *cluster) nodeNames() []string {
	var list corev1.NodeList
	if err := c.k.List(c.ctx, &list); err != nil {
		return nil
	}
	out := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

// machines lists the nodes whose machine runs: those with a Node, and
// those whose Node was deleted while their handler runs.
func (c *cluster) machines() []string {
	out := c.nodeNames()
	for _, n := range c.orphans.list() {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// quarantined lists the addresses the pools still quarantine, with their
// former holder.
func (c *cluster) quarantined(pools ...string) []string {
	var out []string
	for _, name := range pools {
		var p ippoolv1.NodeIPPool
		if err := c.k.Get(c.ctx, types.NamespacedName{Name: name}, &p); err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, q := range p.Status.Quarantined {
			out = append(out, fmt.Sprintf("%s of %s", q.IP, q.Node))
		}
	}
	return out
}

// releases counts the pools' Events about releases, by reason: what the
// run's figures in docs/reliability.md report.
func (c *cluster) releases() string {
	counts := map[string]int{}
	for _, name := range []string{pool4, pool6} {
		evs, err := envtest.Events(c.ctx, c.k, "NodeIPPool", name)
		if err != nil {
			return err.Error()
		}
		for _, e := range evs {
			reason, _, _ := strings.Cut(e, ":")
			counts[reason]++
		}
	}
	var parts []string
	for _, r := range []string{ippoolv1.ReasonAddressReleased, ippoolv1.ReasonQuarantineLifted, ippoolv1.ReasonReleaseFailed,
		ippoolv1.ReasonAddressStillCarried, ippoolv1.ReasonReleaseUnconfirmed, ippoolv1.ReasonAllocationRevoked, ippoolv1.ReasonGarbageCollected} {
		parts = append(parts, fmt.Sprintf("%s %d", r, counts[r]))
	}
	return strings.Join(parts, ", ")
}

// converged waits until every node holds its addresses.
func (c *cluster) converged(within time.Duration) {
	c.t.Helper()
	Eventually(c.unconverged, within).Should(BeEmpty())
}

// unconverged describes every node whose enactment is not Available with
// one address of each pool, or whose network does not carry both.
func (c *cluster) unconverged() map[string]string {
	out := map[string]string{}
	nodes := c.nodeNames()
	if nodes == nil {
		return map[string]string{"": "the nodes cannot be listed"}
	}
	nets := c.networks(nodes)
	for _, node := range nodes {
		var e nncev1beta1.NodeNetworkConfigurationEnactment
		if err := c.k.Get(c.ctx, types.NamespacedName{Name: node + "." + policy}, &e); err != nil {
			out[node] = err.Error()
			continue
		}
		var state string
		for _, cond := range e.Status.Conditions {
			if cond.Status == corev1.ConditionTrue {
				state = string(cond.Type) + " " + string(cond.Reason) + ": " + cond.Message
			}
		}
		// Both of the policy's, and the pooled policy's when it has one.
		want := 2
		if c.pooledOn != "" {
			want++
		}
		if !strings.HasPrefix(state, "Available") || len(e.Status.IPPool[pool4].Allocated) != 1 ||
			len(e.Status.IPPool[pool6].Allocated) != 1 || len(nets[node]) != want {
			out[node] = fmt.Sprintf("%q, records %v, network %v", state, e.Status.IPPool, nets[node])
		}
	}
	return out
}

// dumpStuck makes the handlers of unconverged nodes print their goroutines
// into their logs (SIGQUIT), for the logs copied on failure.
func (c *cluster) dumpStuck() {
	raw, err := os.ReadFile(filepath.Join(c.dir, "state.json"))
	if err != nil {
		return
	}
	var st struct {
		Processes map[string]struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	if json.Unmarshal(raw, &st) != nil {
		return
	}
	for node := range c.unconverged() {
		if p, ok := st.Processes["handler/"+node]; ok {
			c.t.Logf("handler of %s (pid %d) sent SIGQUIT: its goroutines are in its log", node, p.PID)
			_ = syscall.Kill(p.PID, syscall.SIGQUIT)
		}
	}
	time.Sleep(time.Second)
}

// liveState reads a simulated node's live state: an uncommitted apply's
// (its checkpoint) while there is one, else the committed state.
func liveState(file string) ([]byte, error) {
	if raw, err := os.ReadFile(file + ".checkpoint"); err == nil {
		var cp struct {
			State json.RawMessage `json:"state"`
		}
		if err := yaml.Unmarshal(raw, &cp); err == nil && len(cp.State) > 0 {
			return cp.State, nil
		}
	}
	return os.ReadFile(file)
}

// networks reads the static addresses of the nodes' simulated networks,
// live.
func (c *cluster) networks(nodes []string) map[string][]string {
	out := map[string][]string{}
	for _, node := range nodes {
		raw, err := liveState(filepath.Join(c.dir, "nodes", node+".yaml"))
		if err != nil {
			continue
		}
		ifaces, err := netstate.StaticAddresses(raw)
		if err != nil {
			continue
		}
		for _, i := range ifaces {
			for _, a := range i.Addresses {
				out[node] = append(out[node], strings.SplitN(a, "/", 2)[0])
			}
		}
	}
	return out
}

// check runs kubectl nodeippool check.
func (c *cluster) check() error {
	out, err := exec.Command(filepath.Join(c.bin, "kubectl-nodeippool"), "check", "--kubeconfig", filepath.Join(c.dir, "kubeconfig")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// later schedules do at at, under key; it reports false if something is
// scheduled under key already (the fault does not happen then).
func (c *cluster) later(key string, at time.Time, do func() bool) bool {
	if _, ok := c.undo[key]; ok {
		return false
	}
	c.undo[key] = &undo{at: at, do: do}
	return true
}

// undoDue does what faults scheduled and is due, or all of it; what fails
// is tried again on the next call. All of it must be done within the
// cluster's patience.
func (c *cluster) undoDue(all bool) {
	c.undoing(all)
	if all {
		Expect(c.undo).To(BeEmpty(), "what the faults undo later was undone")
	}
}

// undoing is undoDue without the verdict: the cleanup calls it, and a
// failed verdict there would skip the rest of the cleanup.
func (c *cluster) undoing(all bool) {
	for key, u := range c.undo {
		if (all || time.Now().After(u.at)) && u.do() {
			delete(c.undo, key)
		}
	}
	if all {
		for end := time.Now().Add(c.patience); len(c.undo) > 0 && time.Now().Before(end); time.Sleep(time.Second) {
			c.undoing(false)
		}
	}
}

// busy reports whether a fault will still act on node later.
func (c *cluster) busy(node string) bool {
	for key := range c.undo {
		if strings.HasSuffix(key, "/"+node) {
			return true
		}
	}
	return c.orphans.has(node)
}

// pick returns a random node that no fault will act on later, or "", and
// names it as the fault's target.
func (c *cluster) pick(rng *rand.Rand) string {
	var free []string
	for _, n := range c.nodeNames() {
		if !c.busy(n) {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return ""
	}
	c.target = free[rng.IntN(len(free))]
	return c.target
}
