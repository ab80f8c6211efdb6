package realnodes

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// kubeletToken returns the service-account token the kubelet of node
// mounted into its handler pod: bound to the pod, with the node's name in
// its node claim.
func kubeletToken(node string) string {
	p := handlerPod(node)
	Expect(p).NotTo(BeNil())
	files, err := filepath.Glob(filepath.Join(dir, "real", node, "kubelet", "pods", string(p.UID), "volumes", "kubernetes.io~projected", "*", "token"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).To(HaveLen(1), "the projected token of %s's handler pod", node)
	raw, err := os.ReadFile(files[0])
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(string(raw))
}

// localConfig returns the admin's configuration of the suite's cluster.
func localConfig() *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	Expect(err).NotTo(HaveOccurred())
	return cfg
}

// scraperToken returns a token of a service account bound to the
// metrics-reader ClusterRole of the install.
func scraperToken() string {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper", Namespace: "default"}}
	Expect(client.IgnoreAlreadyExists(k.Create(ctx, sa))).To(Succeed())
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: prefix + "nmstate-ippool-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}}
	Expect(client.IgnoreAlreadyExists(k.Create(ctx, binding))).To(Succeed())
	tr := &authenticationv1.TokenRequest{}
	Expect(k.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
	return tr.Status.Token
}

// scrape gets a metrics endpoint with token (none if empty) and returns
// the status code, or 0 if it does not answer.
func scrape(url, token string) int {
	code, _, err := envtest.Scrape(ctx, url, token)
	if err != nil {
		return 0
	}
	return code
}
