// Package e2e runs the specification's workflows against a local cluster
// of real processes: etcd, kube-apiserver, the pool controller and one
// handler process per node, each configuring its own simulated network,
// started and changed with the localcluster command and checked with the
// kubectl plugin, as an admin would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	if !RunSpecs(t, "nmstate-ippool end to end") {
		digests.Print()
	}
}

// digests are the failed specs' digests, for TestE2E to print last.
var digests envtest.SpecDigests

var _ = ReportAfterSuite("digests", func(r Report) { digests.Collect(r) })

// grace is the pool controller's garbage collection grace period in the
// local cluster.
const grace = 10 * time.Second

var (
	ctx = context.Background()
	// bin holds the project's commands, built for the suite; dir the local
	// cluster.
	bin, dir string
	k        client.Client
)

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	root, err := os.MkdirTemp("", "nmstate-ippool-e2e-")
	Expect(err).NotTo(HaveOccurred())
	bin, dir = filepath.Join(root, "bin"), filepath.Join(root, "cluster")
	By("building the commands")
	Expect(envtest.BuildCommands(bin, "handler", "pool-controller", "nmstatectl-sim", "localcluster", "kubectl-nodeippool")).To(Succeed())
	By("starting a local cluster of three nodes")
	localcluster("up", "--nodes", "3", "--bin", bin, "--assets", envtest.AssetsDir(), "--gc-grace-period", grace.String())
	DeferCleanup(func() {
		By("stopping the local cluster")
		localcluster("down")
		expectNoProcessLeft()
		_ = os.RemoveAll(root)
	})
	k, err = envtest.LocalClusterClient(dir)
	Expect(err).NotTo(HaveOccurred())
})

// When a spec fails, the tails of the pool controller's and the handlers'
// logs go to its report: on a CI machine they are all there is to read.
var _ = JustAfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	envtest.PrintLogTails(GinkgoWriter, dir, logTail, func(name string) bool {
		return name == "etcd.log" || name == "kube-apiserver.log"
	})
})

// logTail is how many lines of each log a failed spec reports.
const logTail = 40

// After every spec the plugin finds the pools and the enactments in
// agreement (Unique, Indexed, no leaks), and the spec's objects are gone.
var _ = AfterEach(func() {
	By("checking pools against enactments with kubectl nodeippool check")
	Eventually(func() (string, error) { return plugin("check") }).Should(ContainSubstring("agree with their holders' records"))
	By("cleaning up the spec's policies and pools")
	var policies nmstatev1.NodeNetworkConfigurationPolicyList
	Expect(k.List(ctx, &policies)).To(Succeed())
	for i := range policies.Items {
		Expect(client.IgnoreNotFound(k.Delete(ctx, &policies.Items[i]))).To(Succeed())
	}
	Eventually(func() []string { return names(&nncev1beta1.NodeNetworkConfigurationEnactmentList{}) }).Should(BeEmpty())
	var pools ippoolv1.NodeIPPoolList
	Expect(k.List(ctx, &pools)).To(Succeed())
	for i := range pools.Items {
		Expect(client.IgnoreNotFound(k.Delete(ctx, &pools.Items[i]))).To(Succeed())
	}
	Eventually(func() []string { return names(&ippoolv1.NodeIPPoolList{}) }).Should(BeEmpty())
})

// localcluster runs the localcluster command on the suite's cluster.
func localcluster(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(filepath.Join(bin, "localcluster"), append(args, "--dir", dir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	Expect(err).NotTo(HaveOccurred(), "localcluster %v:\n%s", args, out.String())
	return out.String()
}

// plugin runs the kubectl plugin on the suite's cluster; an exit code other
// than 0 is an error carrying the output.
func plugin(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(bin, "kubectl-nodeippool"), append(args, "--kubeconfig", filepath.Join(dir, "kubeconfig"))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl nodeippool %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

// expectNoProcessLeft checks that down left none of the processes the
// cluster started.
func expectNoProcessLeft() {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	Expect(err).NotTo(HaveOccurred())
	var st struct {
		Processes map[string]struct {
			PID    int    `json:"pid"`
			Binary string `json:"binary"`
		} `json:"processes"`
	}
	Expect(json.Unmarshal(raw, &st)).To(Succeed())
	Expect(st.Processes).To(HaveKey("etcd"))
	for name, p := range st.Processes {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
		if err != nil {
			continue
		}
		// A PID another program took since (PIDs wrap at 32768 here, and
		// other suites start processes too) is not the cluster's.
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
		if want, _ := filepath.EvalSymlinks(p.Binary); err != nil || strings.TrimSuffix(exe, " (deleted)") != want {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		Expect(fields[0]).To(BeElementOf("Z", "X"), "%s (pid %d, %s) still runs", name, p.PID, p.Binary)
	}
}

// controllerMetrics scrapes the pool controller of the local cluster.
func controllerMetrics() (envtest.Metrics, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st struct {
		Processes map[string]struct {
			Metrics string `json:"metrics"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	code, body, err := envtest.Scrape(ctx, st.Processes["pool-controller"].Metrics, "")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape the pool controller: %d", code)
	}
	return envtest.ParseMetrics(body)
}

// poolMetric returns a pool's series of name from the pool controller,
// -1 if it has none.
func poolMetric(name, pool string, labels ...string) func() (float64, error) {
	return func() (float64, error) {
		samples, err := controllerMetrics()
		if err != nil {
			return 0, err
		}
		want := map[string]string{"pool": pool}
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			want[k] = v
		}
		if v, ok := samples.Value(name, want); ok {
			return v, nil
		}
		return -1, nil
	}
}

func names(list client.ObjectList) []string {
	Expect(k.List(ctx, list)).To(Succeed())
	items, err := meta.ExtractList(list)
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, o := range items {
		out = append(out, o.(client.Object).GetName())
	}
	return out
}

func createPool(name string, r ippoolv1.IPRange) {
	GinkgoHelper()
	Expect(k.Create(ctx, &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: r}})).To(Succeed())
}

// applySample creates an object of deploy/samples.
func applySample(file string, into client.Object) {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "deploy", "samples", file))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.UnmarshalStrict(raw, into)).To(Succeed())
	Expect(k.Create(ctx, into)).To(Succeed())
}

// createPolicy creates a policy for every worker whose capture addr draws
// from pool onto eth1.
func createPolicy(name, pool string) {
	GinkgoHelper()
	createPolicyWith(name, map[string]string{"addr": "ippool." + pool + ".allocate"}, envtest.OneAddressState)
}

func createPolicyWith(name string, captures map[string]string, desired string) {
	GinkgoHelper()
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/worker": ""}
	p.Spec.Capture = captures
	p.Spec.DesiredState = shared.NewState(desired)
	Expect(k.Create(ctx, p)).To(Succeed())
}

// policyAvailable waits until a policy is Available on every node it
// selects.
func policyAvailable(name string) {
	GinkgoHelper()
	Eventually(func() string { return envtest.PolicyAvailability(ctx, k, name) }).
		Should(MatchRegexp(`^True SuccessfullyConfigured: \d+/\d+ nodes successfully configured$`), "policy %s", name)
}

// enactment returns node.policy, or nil while it does not exist.
func enactment(node, policy string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, shared.EnactmentKey(node, policy), &e); err != nil {
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), err)
		return nil
	}
	return &e
}

// held returns the addresses node.policy records from pool.
func held(node, policy, pool string) []string {
	if e := enactment(node, policy); e != nil {
		return e.Status.IPPool[pool].Allocated
	}
	return nil
}

// trueCondition returns "Type Reason: message" of node.policy's True
// condition.
func trueCondition(node, policy string) func() string {
	return func() string {
		e := enactment(node, policy)
		if e == nil {
			return "no enactment"
		}
		for _, c := range e.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				return fmt.Sprintf("%s %s: %s", c.Type, c.Reason, c.Message)
			}
		}
		return "no condition"
	}
}

// configured returns every address the node's simulated network carries
// on iface: what its handlers applied, this spec's and earlier ones'.
func configured(node, iface string) []string {
	return envtest.NewNode(node, filepath.Join(dir, "nodes"), filepath.Join(bin, "nmstatectl-sim")).ConfiguredAll(iface)
}

// poolAvailable returns "Status Reason" of a pool's Available condition.
func poolAvailable(name string) func() string {
	return poolCondition(name, ippoolv1.ConditionAvailable)
}

// poolCondition returns "Status Reason" of a pool's condition of type t.
func poolCondition(name, t string) func() string {
	return func() string {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, types.NamespacedName{Name: name}, &p); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, t)
		if c == nil {
			return "none"
		}
		return fmt.Sprintf("%s %s", c.Status, c.Reason)
	}
}

// poolBits returns the addresses set in a pool's bitmap.
func poolBits(name string) []string {
	ips, err := envtest.PoolAddresses(ctx, k, name)
	Expect(err).NotTo(HaveOccurred())
	return ips
}

// kept returns the addresses a pool keeps for deleted nodes' return.
func kept(name string) []string {
	ips, err := envtest.KeptAddresses(ctx, k, name)
	Expect(err).NotTo(HaveOccurred())
	return ips
}

// events returns the reasons and notes of the Events about an object.
func events(kind, name string) []string {
	out, err := envtest.Events(ctx, k, kind, name)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// annotateReset sets nmstate.io/reset-ippool on an object and waits until
// the pool controller has removed it.
func annotateReset(o client.Object, value string) {
	GinkgoHelper()
	Eventually(func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		o.SetAnnotations(map[string]string{ippoolv1.ResetIPPoolAnnotation: value})
		return k.Update(ctx, o)
	}).Should(Succeed())
	Eventually(func() map[string]string {
		Expect(k.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		return o.GetAnnotations()
	}).ShouldNot(HaveKey(ippoolv1.ResetIPPoolAnnotation))
}
