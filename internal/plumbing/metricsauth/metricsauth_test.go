package metricsauth_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/metricsauth"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestSecureMetrics serves metrics as the components do by default and
// scrapes them four ways: without credentials (401), with a token the API
// server does not know (401, not 500), with a service
// account's token that nothing authorizes (403), and with one bound to
// deploy/rbac/metrics's nmstate-ippool-metrics-reader (200, the metrics).
func TestSecureMetrics(t *testing.T) {
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admin, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)

	var f metricsauth.Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Bind(fs, "")
	must(t, fs.Parse([]string{"--metrics-bind-address=" + freeAddr(t)}))
	if !f.Secure {
		t.Fatal("metrics are not secure by default")
	}
	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: f.Options()})
	must(t, err)
	go func() { _ = mgr.Start(ctx) }()

	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "deploy", "rbac", "metrics", "metrics_reader.yaml"))
	must(t, err)
	var reader rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &reader))
	must(t, admin.Create(ctx, &reader))
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}))
	for _, sa := range []string{"prometheus", "nosy"} {
		must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: "monitoring"}}))
	}
	must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "monitoring"}}}))

	url := "https://" + f.BindAddress + "/metrics"
	for _, tt := range []struct {
		who     string
		account string
		want    int
	}{
		{"no credentials", "", http.StatusUnauthorized},
		{"a token the API server does not know", "!forged", http.StatusUnauthorized},
		{"a service account nothing authorizes", "nosy", http.StatusForbidden},
		{"a service account bound to " + reader.Name, "prometheus", http.StatusOK},
	} {
		t.Run(tt.who, func(t *testing.T) {
			token := ""
			if forged, ok := strings.CutPrefix(tt.account, "!"); ok {
				token = forged
			} else if tt.account != "" {
				token = accountToken(ctx, t, env, tt.account)
			}
			code, body := scrape(t, url, token)
			if code != tt.want {
				t.Fatalf("a scrape with %s got %d, want %d: %s", tt.who, code, tt.want, body)
			}
			if code == http.StatusOK && len(body) == 0 {
				t.Fatal("an authorized scrape got no metrics")
			}
		})
	}
}

// scrape gets url with token (none if empty), waiting for the endpoint to
// listen, and returns the status code and body.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, err := envtest.Scrape(context.Background(), url, token)
		if err == nil {
			return code, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics endpoint does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// accountToken returns a token of a service account of the monitoring
// namespace.
func accountToken(ctx context.Context, t *testing.T, env *envtest.Env, account string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	must(t, err)
	tr, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, account, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = l.Close() }()
	return fmt.Sprint(l.Addr())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
