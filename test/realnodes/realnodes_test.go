// Package realnodes runs the install of deploy/local, moved into another
// namespace under a name prefix as an admin's overlay does
// (deploy/testdata/infra-net), on a local cluster of real nodes: kubelets with their own containerd and network namespace,
// kube-controller-manager, kube-scheduler and kube-proxy, all built from
// the pinned Kubernetes module (localcluster up --kubelets). The handler
// runs as the DaemonSet's pods and the pool controller as the Deployment's
// two replicas, from images built without Docker (make images-local), with
// the service accounts and RBAC of deploy/. It needs root and Debian's
// containerd: make test-real-nodes installs and builds what it needs and
// runs it; elsewhere it is skipped.
package realnodes

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// enableEnv turns the suite on; make test-real-nodes sets it.
const enableEnv = "REAL_NODES_E2E"

func TestRealNodes(t *testing.T) {
	if os.Getenv(enableEnv) == "" {
		t.Skipf("the install on real nodes needs root, containerd and the node components: run make test-real-nodes (it sets %s=1)", enableEnv)
	}
	RegisterFailHandler(Fail)
	if !RunSpecs(t, "nmstate-ippool on real nodes") {
		digests.Print()
	}
}

// digests are the failed specs' digests, for TestRealNodes to print last.
var digests envtest.SpecDigests

var _ = ReportAfterSuite("digests", func(r Report) { digests.Collect(r) })

// installEnv chooses how the suite installs: kustomize (the default)
// or helm; make test-real-nodes passes REAL_NODES_INSTALL.
const installEnv = "REAL_NODES_INSTALL"

// install is how the suite installs, and namespace and prefix where and
// under which name prefix the install lives, so that the suite proves the
// admission policies follow the install (make demo REAL=1 installs
// deploy/local as it is):
//   - kustomize: deploy/testdata/infra-net, an admin's overlay of
//     deploy/local, with kubectl apply -k;
//   - helm: the Helm chart with deploy/local/helm-values.yaml, as release
//     nmstate-ippool in namespace infra-net (a chart has no name prefix);
//   - upgrade: the same overlay of an earlier version
//     (envtest.EarlierVersion), upgraded to this version's and back
//     (upgrade_test.go); the other specs are skipped.
var install, namespace, prefix = func() (string, string, string) {
	switch os.Getenv(installEnv) {
	case "helm":
		return "helm", "infra-net", ""
	case "upgrade":
		return "upgrade", "infra-net", "acme-"
	}
	return "kustomize", "infra-net", "acme-"
}()

const (
	// The sample pool and policy of deploy/samples.
	pool, policy, iface = "traffic-1", "static-ip", "eth1"
	// simStateDir is where deploy/local's handler pods keep each node's
	// simulated network, on the host.
	simStateDir = "/var/lib/nmstate-ippool-local"
)

var (
	ctx = context.Background()
	// bin holds the commands built for the suite; dir the cluster.
	bin, dir string
	k        client.WithWatch
	// samples is the deploy/samples the suite creates objects from: the
	// earlier version's when it upgrades.
	samples = filepath.Join(envtest.RepoRoot(), "deploy", "samples")
	// earlier is the earlier version's overlay, when the suite upgrades.
	earlier string
)

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	root, err := os.MkdirTemp("", "nmstate-ippool-real-")
	Expect(err).NotTo(HaveOccurred())
	bin, dir = filepath.Join(root, "bin"), filepath.Join(root, "cluster")
	repo := envtest.RepoRoot()
	By("building localcluster and the kubectl plugin")
	Expect(envtest.BuildCommands(bin, "localcluster", "kubectl-nodeippool")).To(Succeed())
	images, overlay, up := filepath.Join(repo, "bin", "images"), filepath.Join(repo, "deploy", "testdata", "infra-net"), []string(nil)
	if install == "upgrade" {
		var tree string
		images, tree = buildEarlierVersion(root)
		earlier, samples = earlierOverlay(tree), filepath.Join(tree, "deploy", "samples")
		overlay, up = earlier, []string{"--crd-dir", filepath.Join(tree, "deploy", "crd")}
	}
	By("starting two real nodes")
	localcluster(append([]string{"up", "--kubelets", "2", "--bin", bin, "--assets", envtest.AssetsDir(), "--images", images}, up...)...)
	DeferCleanup(func() {
		By("stopping the cluster")
		localcluster("down")
		_ = os.RemoveAll(root)
	})
	k, err = envtest.LocalClusterClient(dir)
	Expect(err).NotTo(HaveOccurred())
	if install == "helm" {
		By("installing the Helm chart in namespace " + namespace + " with deploy/local/helm-values.yaml (helm upgrade --install)")
		localcluster("install", "--helm", filepath.Join(repo, "deploy", "helm", "nmstate-ippool"), "--namespace", namespace,
			"--values", filepath.Join(repo, "deploy", "local", "helm-values.yaml"),
			"--helm-bin", filepath.Join(repo, "bin", "helm"), "--kubectl", filepath.Join(repo, "bin", "kubectl"))
		return
	}
	By("installing deploy/local in namespace " + namespace + " under the prefix " + prefix + " (" + overlay + ") with kubectl apply -k")
	installOverlay(overlay)
})

// installOverlay installs (or upgrades to) an overlay of deploy/local with
// localcluster install: kubectl apply -k, the webhook's certificate as
// cert-manager would issue it, and a wait until the pods run.
func installOverlay(overlay string) {
	GinkgoHelper()
	repo := envtest.RepoRoot()
	localcluster("install", "--overlay", overlay, "--kubectl", filepath.Join(repo, "bin", "kubectl"),
		"--cert-manager-crds", filepath.Join(repo, "deploy", "testdata", "cert-manager-crds.yaml"))
}

// When a spec fails, the pods' logs, the events and the tails of the
// node components' logs go to its report.
var _ = JustAfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	GinkgoWriter.Println(kubectl("get", "pods,nodes,nnce,nodeippool", "-A", "-o", "wide"))
	GinkgoWriter.Println(kubectl("get", "events", "-A", "--sort-by=.lastTimestamp"))
	GinkgoWriter.Println(kubectl("-n", namespace, "logs", "-l", "app.kubernetes.io/name=nmstate-ippool", "--tail=40", "--prefix", "--max-log-requests=10"))
	envtest.PrintLogTails(GinkgoWriter, dir, 20, func(name string) bool { return strings.HasPrefix(name, "etcd") })
})

var _ = Describe("The install of deploy/local, moved by an admin's overlay, on real nodes", Ordered, func() {
	nodes := []string{"real01", "real02"}
	ips := map[string]string{}
	BeforeAll(func() {
		if install == "upgrade" {
			Skip("the suite installed an earlier version, to upgrade it")
		}
	})

	It("runs the handler on every node and two pool controller replicas, one of them leading", func() {
		Eventually(func() []string { return podNodes("handler") }).Should(ConsistOf(nodes))
		Eventually(func() int { return len(podNodes("pool-controller")) }).Should(Equal(2))
		Eventually(leader).Should(BeElementOf(podNames("pool-controller")))
		for _, node := range nodes {
			Eventually(func() string { return nodeState(node) }).ShouldNot(BeEmpty(), "the handler pod on %s reports its NodeNetworkState", node)
		}
	})

	It("gives every node its own address from the sample pool", func() {
		applySample("nodeippool.yaml", &ippoolv1.NodeIPPool{})
		applySample("nncp.yaml", &nmstatev1.NodeNetworkConfigurationPolicy{})
		for _, node := range nodes {
			ips[node] = address(node)
		}
		Expect(envtest.Distinct(ips)).To(HaveLen(2))
		agree()
	})

	It("scale up: a kubelet joins, the DaemonSet runs a handler on it, and it gets its own address", func() {
		localcluster("node", "add", "real03", "--kubelet")
		nodes = append(nodes, "real03")
		Eventually(func() []string { return podNodes("handler") }).Should(ConsistOf(nodes))
		ips["real03"] = address("real03")
		Expect(envtest.Distinct(ips)).To(HaveLen(3))
		agree()
	})

	It("helm upgrade: the handler and the pool controller roll to the new values, and every node keeps its address", func() {
		if install != "helm" {
			Skip("the suite installed with kubectl apply -k; " + installEnv + "=helm installs the Helm chart")
		}
		before := podNames("handler")
		out, err := exec.Command(filepath.Join(envtest.RepoRoot(), "bin", "helm"), "upgrade", "nmstate-ippool",
			filepath.Join(envtest.RepoRoot(), "deploy", "helm", "nmstate-ippool"), "--kubeconfig", filepath.Join(dir, "kubeconfig"),
			"--namespace", namespace, "--reuse-values",
			"--set", "handler.extraArgs[0]=--failed-requeue=45s", "--set", "poolController.gcGracePeriod=3m").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Eventually(func() []string {
			var names []string
			for _, p := range pods("handler") {
				if slices.Contains(p.Spec.Containers[0].Args, "--failed-requeue=45s") {
					names = append(names, p.Spec.NodeName)
				}
			}
			return names
		}).Should(ConsistOf(nodes), "a handler of the new DaemonSet runs on every node")
		Expect(podNames("handler")).NotTo(ContainElements(before))
		Eventually(func() int {
			n := 0
			for _, p := range pods("pool-controller") {
				if slices.Contains(p.Spec.Containers[0].Args, "--gc-grace-period=3m") {
					n++
				}
			}
			return n
		}).Should(Equal(2), "both pool controller replicas run the new arguments")
		Eventually(leader).Should(BeElementOf(podNames("pool-controller")))
		for _, node := range nodes {
			Consistently(func() []string { return held(node) }, 5*time.Second).Should(Equal([]string{ips[node]}))
			Expect(configured(node)).To(ContainElement(HavePrefix(ips[node] + "/")))
		}
		agree()
	})

	It("keeps a node's address when its handler pod is deleted and the DaemonSet starts another", func() {
		old := handlerPod("real02")
		Expect(k.Delete(ctx, old)).To(Succeed())
		Eventually(func() types.UID {
			if p := handlerPod("real02"); p != nil && ready(p) {
				return p.UID
			}
			return ""
		}).ShouldNot(BeElementOf(old.UID, types.UID("")))
		Consistently(func() []string { return held("real02") }, 10*time.Second).Should(Equal([]string{ips["real02"]}))
		Expect(configured("real02")).To(ContainElement(HavePrefix(ips["real02"] + "/")))
		Expect(trueCondition("real02")).To(HavePrefix("Available"))
		agree()
	})

	It("the other pool controller replica leads when the leader's pod is killed", func() {
		killed := leader()
		Expect(killed).NotTo(BeEmpty())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: killed, Namespace: namespace}}
		Expect(k.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(leader).ShouldNot(BeElementOf(killed, ""))
		By("the new leader reconciling the pool")
		Expect(editPool(func(p *ippoolv1.NodeIPPool) {
			p.Spec.Range.Exclude = append(p.Spec.Range.Exclude, "10.10.10.7")
		})).To(Succeed())
		Eventually(func() bool {
			var p ippoolv1.NodeIPPool
			Expect(k.Get(ctx, client.ObjectKey{Name: pool}, &p)).To(Succeed())
			return p.Status.ObservedGeneration == p.Generation
		}).Should(BeTrue())
		Eventually(func() int { return len(podNames("pool-controller")) }).Should(Equal(2))
		agree()
	})

	It("keeps a handler's credentials, as the kubelet mints them, to its own node, and metrics to authorized scrapers", func() {
		token := kubeletToken("real01")
		asReal01, err := client.New(envtest.BearerConfig(localConfig(), token), client.Options{Scheme: k.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		victims := envtest.Victims{Enactment: enactment("real02"), State: &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: "real02"}},
			Pool: &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}}, Policy: &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy}}}
		Expect(victims.Enactment).NotTo(BeNil())
		handler := envtest.Attacker{Node: "real01", User: "system:serviceaccount:" + namespace + ":" + prefix + "nmstate-ippool-handler"}
		for _, attack := range envtest.Attacks(handler, victims) {
			By(attack.Name)
			Expect(attack.Try(ctx, k, asReal01)).To(Succeed())
		}
		By("its own node's objects still taking its writes")
		own := enactment("real01")
		Expect(asReal01.Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test.nmstate-ippool.io/own-write":"yes"}}}`)))).To(Succeed())
		Expect(asReal01.Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test.nmstate-ippool.io/own-write":null}}}`)))).To(Succeed())
		var state nncev1beta1.NodeNetworkState
		Expect(asReal01.Get(ctx, client.ObjectKey{Name: "real01"}, &state)).To(Succeed())
		Expect(asReal01.Status().Update(ctx, &state)).To(Succeed())
		Expect(held("real02")).To(Equal([]string{ips["real02"]}))
		Expect(configured("real02")).To(ContainElement(HavePrefix(ips["real02"] + "/")))
		agree()

		By("metrics: refused without credentials and to the handler's, served to a scraper bound to nmstate-ippool-metrics-reader")
		metrics := "https://10.89.0.11:8089/metrics" // real01's handler, in its node's network
		Eventually(func() int { return scrape(metrics, "") }).Should(Equal(http.StatusUnauthorized))
		Expect(scrape(metrics, token)).To(Equal(http.StatusForbidden))
		Expect(scrape(metrics, scraperToken())).To(Equal(http.StatusOK))
	})

	It("scale down: the garbage collector deletes a removed Node's enactment, and the finalizer holds it and its address until the pool controller released it", func() {
		By("stopping the pool controller, so that only Kubernetes' garbage collector deletes the enactment")
		scalePoolController(0)
		DeferCleanup(func() { scalePoolController(2) })
		e := enactment("real03")
		Expect(e).NotTo(BeNil())
		Expect(e.OwnerReferences).To(ContainElement(HaveField("Kind", "Node")))
		Expect(e.Finalizers).To(ContainElement(ippoolv1.FinalizerIPPool))
		w, err := k.Watch(ctx, &nncev1beta1.NodeNetworkConfigurationEnactmentList{},
			client.MatchingLabels{shared.EnactmentNodeLabel: "real03"})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()

		var mu sync.Mutex
		var seen []string // what the watch saw of the enactment
		held := false
		go func() {
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(*nncev1beta1.NodeNetworkConfigurationEnactment)
				if !ok {
					continue
				}
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s deletionTimestamp=%v finalizers=%v", ev.Type, o.DeletionTimestamp, o.Finalizers))
				held = held || (o.DeletionTimestamp != nil && slices.Contains(o.Finalizers, ippoolv1.FinalizerIPPool))
				mu.Unlock()
			}
		}()
		Expect(k.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real03"}})).To(Succeed())
		Eventually(func() bool { mu.Lock(); defer mu.Unlock(); return held }, 30*time.Second).Should(BeTrue(),
			func() string {
				mu.Lock()
				defer mu.Unlock()
				return "held by the finalizer while terminating; the watch saw:\n" + strings.Join(seen, "\n")
			})
		By("with no pool controller to release it, the record and the address stay: handed to nobody")
		Consistently(func(g Gomega) {
			g.Expect(enactment("real03")).NotTo(BeNil())
			g.Expect(poolAddresses()).To(ContainElement(ips["real03"]))
		}, 10*time.Second).Should(Succeed())

		By("the pool controller, back, retiring the enactment, freeing the address once the departure hold passed, and keeping it for the node's return")
		scalePoolController(2)
		Eventually(func() *nncev1beta1.NodeNetworkConfigurationEnactment { return enactment("real03") }).Should(BeNil())
		Eventually(poolAddresses).ShouldNot(ContainElement(ips["real03"]))
		kept, err := envtest.KeptAddresses(ctx, k, pool)
		Expect(err).NotTo(HaveOccurred())
		Expect(kept).To(ContainElement(ips["real03"]))

		By("stopping the node")
		localcluster("node", "remove", "real03")
		agree()
	})

	It("helm uninstall, then install in companion mode: the pool controller alone, ready, and a pooled policy gives each node its own address", companionAfterUninstall)
})
