// Package peer runs kubernetes-nmstate's handler, built unmodified from
// ../shared/peers, as the handler of a local cluster's simulated nodes,
// and checks what admins who run it today meet when they switch to ours
// and back. It skips when the checkout has no peers folder.
package peer

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

func TestPeer(t *testing.T) {
	RegisterFailHandler(Fail)
	if !RunSpecs(t, "beside kubernetes-nmstate's handler") {
		digests.Print()
	}
}

var digests envtest.SpecDigests

var _ = ReportAfterSuite("digests", func(r Report) { digests.Collect(r) })

var (
	ctx = context.Background()
	// bin holds the project's commands, built for the suite, and
	// kubernetes-nmstate's handler; dir the local cluster.
	bin, dir string
	k        client.Client
	// peerHandler is kubernetes-nmstate's handler.
	peerHandler string
)

// workers are the nodes the suite's cluster starts with.
var workers = []string{"node01", "node02", "node03", "node04"}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	var err error
	peerHandler, err = envtest.PeerHandler()
	Expect(err).NotTo(HaveOccurred())
	if peerHandler == "" {
		Skip("no kubernetes-nmstate source in ../shared/peers: its handler cannot be built")
	}
	root, err := os.MkdirTemp("", "nmstate-ippool-peer-")
	Expect(err).NotTo(HaveOccurred())
	bin, dir = filepath.Join(root, "bin"), filepath.Join(root, "cluster")
	By("building the commands")
	Expect(envtest.BuildCommands(bin, "handler", "pool-controller", "nmstatectl-sim", "localcluster", "kubectl-nodeippool")).To(Succeed())
	By("starting a local cluster whose nodes run kubernetes-nmstate's handler")
	localcluster("up", "--nodes", "4", "--handler", "upstream", "--peer-handler", peerHandler,
		"--bin", bin, "--assets", envtest.AssetsDir())
	DeferCleanup(func() {
		By("stopping the local cluster")
		localcluster("down")
		_ = os.RemoveAll(root)
	})
	k, err = envtest.LocalClusterClient(dir)
	Expect(err).NotTo(HaveOccurred())
})

var _ = JustAfterEach(func() {
	if CurrentSpecReport().Failed() {
		envtest.PrintLogTails(GinkgoWriter, dir, 40, func(name string) bool {
			return name == "etcd.log" || name == "kube-apiserver.log"
		})
	}
})

// localcluster runs the localcluster command on the suite's cluster.
func localcluster(args ...string) string {
	GinkgoHelper()
	return localclusterIn(dir, args...)
}

// localclusterIn runs the localcluster command on the cluster of a
// directory.
func localclusterIn(dir string, args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(filepath.Join(bin, "localcluster"), append(args, "--dir", dir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	Expect(cmd.Run()).To(Succeed(), "localcluster %v:\n%s", args, out.String())
	return out.String()
}

// writeFile writes content to a file of its own and returns its path.
func writeFile(content string) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "proposal.yaml")
	Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	return path
}

// policyAvailableIn waits until an NNCP is Available, as
// kubernetes-nmstate's handler reports it, in the cluster of k.
func policyAvailableIn(k client.Client, name string) {
	GinkgoHelper()
	Eventually(func() string { return envtest.PolicyAvailability(ctx, k, name) }).
		Should(MatchRegexp(`^True SuccessfullyConfigured: \d+/\d+ nodes successfully configured$`), "policy %s", name)
}
