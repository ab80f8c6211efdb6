package pki

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestComponentIdentities: every Kubernetes component of a real node
// cluster gets a client certificate of the cluster's CA for the user its
// authorizer expects, a kubelet's issued when its node is added, and a
// kubeconfig that carries it.
func TestComponentIdentities(t *testing.T) {
	keys := Keys{Dir: t.TempDir()}
	if err := keys.Generate(); err != nil {
		t.Fatal(err)
	}
	if err := keys.IssueKubelet("real07"); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, keys.Path("ca.crt")))
	for identity, want := range map[string]struct {
		user   string
		groups []string
	}{
		"admin":                   {"admin", []string{"system:masters"}},
		"kube-controller-manager": {"system:kube-controller-manager", nil},
		"kube-scheduler":          {"system:kube-scheduler", nil},
		"kube-proxy":              {"system:kube-proxy", nil},
		KubeletIdentity("real07"): {"system:node:real07", []string{"system:nodes"}},
	} {
		cert := readCert(t, keys.Path(identity+".crt"))
		if cert.Subject.CommonName != want.user || !slices.Equal(cert.Subject.Organization, want.groups) {
			t.Errorf("%s: user %q groups %q, want %q %q", identity, cert.Subject.CommonName, cert.Subject.Organization, want.user, want.groups)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: not a client certificate of the cluster's CA: %v", identity, err)
		}
		path := keys.Path(identity + ".kubeconfig")
		if err := keys.WriteKubeconfig(path, "https://10.89.0.1:6443", identity); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if got := readCertPEM(t, cfg.CertData); got.Subject.CommonName != want.user {
			t.Errorf("%s: the kubeconfig carries %q", identity, got.Subject.CommonName)
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readCertPEM(t, raw)
}

func readCertPEM(t *testing.T, raw []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
