// Package pki issues the local cluster's certificates and kubeconfigs,
// signed by a CA of its own.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Keys holds the files of the local control plane's certificates: a CA and
// its key, the API server's serving certificate, an admin client
// certificate (system:masters), client certificates of the Kubernetes
// components (kubelets' are issued as nodes are added), a serving
// certificate on loopback for the controller manager and scheduler, the
// pool controller's webhook serving certificates and the service account
// signing key.
type Keys struct {
	// Dir is the directory of the files.
	Dir string
}

// Path is the path of the file name in the directory.
func (p Keys) Path(name string) string { return filepath.Join(p.Dir, name) }

// WebhookCertDir holds the webhook's serving certificate, signed by the
// cluster's CA.
func (p Keys) WebhookCertDir() string { return p.Path("webhook") }

// Generate writes every key and certificate into p.Dir. The API server's
// certificate names, beside loopback and the kubernetes Service's
// address, the serverIPs: where nodes on another network reach it.
func (p Keys) Generate(serverIPs ...string) error {
	if err := os.MkdirAll(p.WebhookCertDir(), 0o700); err != nil {
		return err
	}
	caKey, caCert, err := newCA()
	if err != nil {
		return err
	}
	if err := writeCert(p.Path("ca.crt"), caCert); err != nil {
		return err
	}
	// Kept, for the kubelets of real nodes added later.
	if err := writeKey(p.Path("ca.key"), caKey); err != nil {
		return err
	}
	for name, tmpl := range certificates(serverIPs) {
		if err := p.issue(name, tmpl, caKey, caCert); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(p.Path("sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.Path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// certificates are the certificates the cluster's CA signs, by the name of
// their files in the PKI directory.
func certificates(serverIPs []string) map[string]*x509.Certificate {
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	apiServerIPs := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	for _, ip := range serverIPs {
		apiServerIPs = append(apiServerIPs, net.ParseIP(ip))
	}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return map[string]*x509.Certificate{
		"apiserver": {
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPAddresses: apiServerIPs,
			ExtKeyUsage: server,
		},
		"admin": clientCertificate("admin", "system:masters"),
		// The users Kubernetes' default RBAC gives the control plane's
		// components their permissions, as kubeadm's clusters have them.
		"kube-controller-manager": clientCertificate("system:kube-controller-manager"),
		"kube-scheduler":          clientCertificate("system:kube-scheduler"),
		"kube-proxy":              clientCertificate("system:kube-proxy"),
		// kube-controller-manager's and kube-scheduler's, on loopback, so
		// that their health is probed with the cluster's CA.
		"loopback": {
			Subject: pkix.Name{CommonName: "localcluster-loopback"}, DNSNames: []string{"localhost"},
			IPAddresses: loopback, ExtKeyUsage: server,
		},
		// The pool controller's webhook, served on loopback: the API
		// server calls it by URL (see the poolcontroller package's installWebhook). controller-runtime's
		// webhook server reads tls.crt and tls.key from its
		// --webhook-cert-dir.
		filepath.Join("webhook", "tls"): {
			Subject: pkix.Name{CommonName: "nmstate-ippool-webhook"}, DNSNames: []string{"localhost"},
			IPAddresses: loopback, ExtKeyUsage: server,
		},
	}
}

// IssueWebhookService writes the serving certificate of an install's
// webhook Service (webhook-service.crt, .key) for dnsNames, the names the
// install's cert-manager Certificate asks for: cert-manager would issue
// it; localcluster install puts it in the Certificate's Secret.
func (p Keys) IssueWebhookService(dnsNames []string) error {
	if len(dnsNames) == 0 {
		return errors.New("the webhook's Certificate names no DNS name")
	}
	caKey, ca, err := p.loadCA()
	if err != nil {
		return err
	}
	return p.issue("webhook-service", &x509.Certificate{Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, caKey, ca)
}

// clientCertificate is the template of a client certificate of a user in
// groups.
func clientCertificate(user string, groups ...string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// IssueKubelet writes the client certificate of a node's kubelet, whose
// user and group the Node authorizer and NodeRestriction know.
func (p Keys) IssueKubelet(node string) error {
	caKey, ca, err := p.loadCA()
	if err != nil {
		return err
	}
	return p.issue(KubeletIdentity(node), clientCertificate("system:node:"+node, "system:nodes"), caKey, ca)
}

// KubeletIdentity names the files of a node's kubelet's certificate.
func KubeletIdentity(node string) string { return "kubelet-" + node }

// loadCA reads the CA's key and certificate that Generate wrote.
func (p Keys) loadCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(p.Path("ca.crt"), p.Path("ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("the cluster's CA key %s is not an ECDSA key", p.Path("ca.key"))
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	return key, ca, err
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nmstate-ippool local cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

// issue signs tmpl with the CA and writes name.crt and name.key.
func (p Keys) issue(name string, tmpl *x509.Certificate, caKey *ecdsa.PrivateKey, ca *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign the %s certificate: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	if err := writeCert(p.Path(name+".crt"), cert); err != nil {
		return err
	}
	return writeKey(p.Path(name+".key"), key)
}

func writeCert(path string, cert *x509.Certificate) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// WriteKubeconfig writes a kubeconfig for the API server at url with the
// client certificate of identity (its files' name: "admin",
// "kube-proxy", ...), embedded so that the file works from anywhere.
func (p Keys) WriteKubeconfig(path, url, identity string) error {
	read := func(name string) ([]byte, error) { return os.ReadFile(p.Path(name)) }
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	cert, err := read(identity + ".crt")
	if err != nil {
		return err
	}
	key, err := read(identity + ".key")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: ca}
	cfg.AuthInfos[identity] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: identity}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}
