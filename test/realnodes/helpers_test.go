package realnodes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// localcluster runs the localcluster command on the suite's cluster.
func localcluster(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(filepath.Join(bin, "localcluster"), append(args, "--dir", dir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	GinkgoWriter.Printf("localcluster %v (%.0fs):\n%s\n", args, time.Since(start).Seconds(), out.String())
	// The digest keeps a failure's first lines: the end of the output,
	// where the command says why it failed, goes first.
	Expect(err).NotTo(HaveOccurred(), "localcluster %v failed; the end of its output:\n%s", args, lastLines(out.String(), 12))
	return out.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// kubectl runs the repository's kubectl on the cluster and returns what
// it printed, errors included: it reports, it checks nothing.
func kubectl(args ...string) string {
	out, _ := exec.Command(filepath.Join(envtest.RepoRoot(), "bin", "kubectl"),
		append([]string{"--kubeconfig", filepath.Join(dir, "kubeconfig")}, args...)...).CombinedOutput()
	return string(out)
}

// agree checks, with the kubectl plugin, that the pools and the
// enactments agree.
func agree() {
	GinkgoHelper()
	Eventually(func() (string, error) {
		out, err := exec.Command(filepath.Join(bin, "kubectl-nodeippool"), "check", "--kubeconfig", filepath.Join(dir, "kubeconfig")).CombinedOutput()
		return string(out), err
	}).Should(ContainSubstring("agree with their holders' records"))
}

// pods returns the running pods of a component of the install.
func pods(component string) []corev1.Pod {
	return slices.DeleteFunc(podsOf(component), func(p corev1.Pod) bool { return !ready(&p) })
}

// podsOf returns the pods of a component of the install that are not
// being deleted, ready or not.
func podsOf(component string) []corev1.Pod {
	var list corev1.PodList
	Expect(k.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{"app.kubernetes.io/component": component})).To(Succeed())
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podNodes returns the nodes a component's ready pods run on.
func podNodes(component string) []string {
	var out []string
	for _, p := range pods(component) {
		out = append(out, p.Spec.NodeName)
	}
	return out
}

func podNames(component string) []string {
	var out []string
	for _, p := range pods(component) {
		out = append(out, p.Name)
	}
	return out
}

// handlerPod returns the handler pod of a node that is not terminating, or
// nil.
func handlerPod(node string) *corev1.Pod {
	var list corev1.PodList
	Expect(k.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{"app.kubernetes.io/component": "handler"})).To(Succeed())
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}

// leader returns the pod that holds the pool controller's leader election
// lease (its identity is the pod's hostname, then an ID), or "".
func leader() string {
	var lease coordinationv1.Lease
	if err := k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "nmstate-ippool-pool-controller"}, &lease); err != nil {
		return ""
	}
	holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
	return holder
}

// scalePoolController sets the pool controller's replicas and waits until
// that many pods are ready and no other runs.
func scalePoolController(replicas int32) {
	GinkgoHelper()
	var d appsv1.Deployment
	Expect(k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: prefix + "nmstate-ippool-pool-controller"}, &d)).To(Succeed())
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = ptr.To(replicas)
	Expect(k.Patch(ctx, &d, patch)).To(Succeed())
	Eventually(func() int {
		var list corev1.PodList
		Expect(k.List(ctx, &list, client.InNamespace(namespace),
			client.MatchingLabels{"app.kubernetes.io/component": "pool-controller"})).To(Succeed())
		if len(list.Items) != int(replicas) {
			return -1
		}
		return len(pods("pool-controller"))
	}).Should(Equal(int(replicas)))
}

// applySample creates an object of deploy/samples.
func applySample(file string, into client.Object) {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(samples, file))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.UnmarshalStrict(raw, into)).To(Succeed())
	Expect(k.Create(ctx, into)).To(Succeed())
}

func editPool(change func(*ippoolv1.NodeIPPool)) error {
	// The controllers write the pool's status meanwhile (a new leader
	// does at once): each write moves the resourceVersion.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ippoolv1.NodeIPPool
		if err := k.Get(ctx, client.ObjectKey{Name: pool}, &p); err != nil {
			return err
		}
		change(&p)
		return k.Update(ctx, &p)
	})
}

// enactment returns the node's enactment of the sample policy, or nil.
func enactment(node string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, shared.EnactmentKey(node, policy), &e); err != nil {
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), err)
		return nil
	}
	return &e
}

// held returns the addresses the node's enactment records from the pool.
func held(node string) []string {
	if e := enactment(node); e != nil {
		return e.Status.IPPool[pool].Allocated
	}
	return nil
}

// trueCondition returns "Type Reason: message" of the node's enactment's
// True condition.
func trueCondition(node string) string {
	e := enactment(node)
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

// configured returns the static addresses of the node's simulated network
// on the sample's interface, read from the file its handler pods keep on
// the host.
func configured(node string) []string {
	raw, err := os.ReadFile(filepath.Join(simStateDir, node+".yaml"))
	if err != nil {
		return nil
	}
	return envtest.InterfaceAddresses(raw, iface)
}

// address waits until the node's enactment is Available with one address
// that its network carries, and returns it.
func address(node string) string {
	GinkgoHelper()
	Eventually(func() string { return trueCondition(node) }).Should(HavePrefix("Available"), node)
	ips := held(node)
	Expect(ips).To(HaveLen(1), node)
	Eventually(func() []string { return configured(node) }).Should(ContainElement(HavePrefix(ips[0]+"/")), node)
	return ips[0]
}

// nodeState returns the interfaces of the node's NodeNetworkState as its
// handler pod reports them, or "".
func nodeState(node string) string {
	var nns nncev1beta1.NodeNetworkState
	if err := k.Get(ctx, client.ObjectKey{Name: node}, &nns); err != nil {
		return ""
	}
	return string(nns.Status.CurrentState.Raw)
}

func poolAddresses() []string {
	ips, err := envtest.PoolAddresses(ctx, k, pool)
	Expect(err).NotTo(HaveOccurred())
	return ips
}
