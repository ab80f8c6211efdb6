package realnodes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// earlierTag is the tag of the earlier version's images; this version's
// are make images-local's, tagged local.
const earlierTag, currentTag = "old", "local"

// An admin upgrades a running install the way a release is applied: the
// CRDs first, then the whole install of the new version with kubectl
// apply -k, which rolls the pool controller's Deployment and the
// handlers' DaemonSet; then downgrades the same way. The earlier version
// (envtest.EarlierVersion) runs from images built from its source, with
// its own overlay, CRDs and samples.
var _ = Describe("An earlier version's install on real nodes, upgraded to this version's and downgraded back", Ordered, func() {
	nodes := []string{"real01", "real02"}
	ips := map[string]string{}
	var applies map[string]int
	BeforeAll(func() {
		if install != "upgrade" {
			Skip(installEnv + "=upgrade installs an earlier version, to upgrade it")
		}
	})

	It("under the earlier version, every node gets its own address", func() {
		runs(earlierTag, len(nodes))
		applySample("nodeippool.yaml", &ippoolv1.NodeIPPool{})
		applySample("nncp.yaml", &nmstatev1.NodeNetworkConfigurationPolicy{})
		for _, node := range nodes {
			ips[node] = address(node)
		}
		Expect(envtest.Distinct(ips)).To(HaveLen(len(nodes)))
		agree()
		applies = appliesOf(nodes)
	})

	It("upgraded, the CRDs first and then the install: every pod runs this version, and no node is renumbered or applied again", func() {
		repo := envtest.RepoRoot()
		Expect(kubectlOK("apply", "-k", filepath.Join(repo, "deploy", "crd"))).To(Succeed())
		installOverlay(filepath.Join(repo, "deploy", "testdata", "infra-net"))
		runs(currentTag, len(nodes))
		unchanged(nodes, ips, applies)
	})

	It("after the upgrade, a node that joins gets its own address", func() {
		localcluster("node", "add", "real03", "--kubelet")
		nodes = append(nodes, "real03")
		runs(currentTag, len(nodes))
		ips["real03"] = address("real03")
		Expect(envtest.Distinct(ips)).To(HaveLen(len(nodes)))
		agree()
		applies = appliesOf(nodes)
	})

	It("downgraded to the earlier version's install: every pod runs it, and no node is renumbered or applied again", func() {
		installOverlay(earlier)
		runs(earlierTag, len(nodes))
		unchanged(nodes, ips, applies)
	})
})

// buildEarlierVersion builds the earlier version's handler and pool
// controller (envtest.EarlierVersion, checked out under root) and their
// images, tagged earlierTag, beside this version's from make images-local;
// it returns the directory of both, for localcluster up --images, and the
// earlier version's tree.
func buildEarlierVersion(root string) (images, tree string) {
	GinkgoHelper()
	built := filepath.Join(envtest.RepoRoot(), "bin", "images")
	tree, bin, images := filepath.Join(root, "earlier"), filepath.Join(root, "earlier-bin"), filepath.Join(root, "images")
	By("building " + envtest.EarlierVersion[:12] + "'s handler and pool controller, and their images tagged " + earlierTag)
	remove, err := envtest.BuildAt(envtest.EarlierVersion, tree, bin, true, "handler", "pool-controller")
	DeferCleanup(remove)
	Expect(err).NotTo(HaveOccurred())
	// The node's nmstatectl is the node's: this version's simulator in
	// both versions' handler images, on the same network file, counting
	// applies.
	raw, err := os.ReadFile(filepath.Join(built, "bin", "nmstatectl-sim"))
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(bin, "nmstatectl-sim"), raw, 0o755)).To(Succeed())
	Expect(os.MkdirAll(images, 0o755)).To(Succeed())
	entries, err := os.ReadDir(built)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		if !e.IsDir() {
			Expect(os.Symlink(filepath.Join(built, e.Name()), filepath.Join(images, e.Name()))).To(Succeed())
		}
	}
	out, err := exec.Command(filepath.Join(built, "images"), "-bin", bin, "-out", images, "-tag", earlierTag).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s", out)
	return images, tree
}

// earlierOverlay writes, in the earlier version's tree, the overlay that
// installs it as the suite installs this version (deploy/testdata/infra-net)
// with its images, and returns its directory.
func earlierOverlay(tree string) string {
	GinkgoHelper()
	dir := filepath.Join(tree, "deploy", "testdata", "upgrade-from")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../infra-net
images:
- name: localhost/nmstate-ippool/handler
  newTag: `+earlierTag+`
- name: localhost/nmstate-ippool/pool-controller
  newTag: `+earlierTag+`
`), 0o644)).To(Succeed())
	return dir
}

// runs waits until the handler runs on n nodes and the pool controller's
// two replicas are ready, every pod from the images tagged tag, and no
// other pod of the install is left.
func runs(tag string, n int) {
	GinkgoHelper()
	for component, want := range map[string]int{"handler": n, "pool-controller": 2} {
		Eventually(func() []string { return tags(component) }).Should(And(HaveLen(want), HaveEach(tag)),
			"the %s pods, ready, and the tags of their images", component)
	}
}

// tags returns the tags of the images a component's pods run, for each
// of its pods not being deleted, ready or not (a pod of the version
// before that has not gone is counted).
func tags(component string) []string {
	var out []string
	for _, p := range podsOf(component) {
		tag := "not ready"
		if ready(&p) {
			_, tag, _ = strings.Cut(p.Spec.Containers[0].Image[strings.LastIndex(p.Spec.Containers[0].Image, "/")+1:], ":")
		}
		out = append(out, tag)
	}
	return out
}

// unchanged checks that every node still holds the address it held, its
// network carries it, and no policy was applied again, and that the pool
// agrees with its holders' records.
func unchanged(nodes []string, ips map[string]string, applies map[string]int) {
	GinkgoHelper()
	for _, node := range nodes {
		Eventually(func() string { return trueCondition(node) }).Should(HavePrefix("Available"), node)
		Consistently(func() []string { return held(node) }, 5*time.Second).Should(Equal([]string{ips[node]}), "%s: renumbered", node)
		Expect(configured(node)).To(ConsistOf(HavePrefix(ips[node]+"/")), node)
	}
	Expect(appliesOf(nodes)).To(Equal(applies), "a policy applied again")
	agree()
}

// appliesOf returns how many applies each node's network took.
func appliesOf(nodes []string) map[string]int {
	out := map[string]int{}
	for _, node := range nodes {
		out[node] = envtest.AppliesTo(filepath.Join(simStateDir, node+".yaml"))
	}
	return out
}

// kubectlOK runs the repository's kubectl on the cluster and fails with
// what it printed.
func kubectlOK(args ...string) error {
	out, err := exec.Command(filepath.Join(envtest.RepoRoot(), "bin", "kubectl"),
		append([]string{"--kubeconfig", filepath.Join(dir, "kubeconfig")}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
