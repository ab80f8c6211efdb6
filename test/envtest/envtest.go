package envtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/enactmentwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/poolwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/statuswebhook"
	projectscheme "github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Scheme *k8sruntime.Scheme
	env    *envtest.Environment
	// apiserverLog is the API server's log file, when $TEST_LOG is set.
	apiserverLog *os.File
}

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// AssetsDir returns the directory holding kube-apiserver and etcd.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "k8s")
}

// Option tunes the control plane Start starts.
type Option func(*envtest.Environment) error

// WithWebhook installs deploy/webhook's configuration, rewritten to call a
// webhook server on loopback with a certificate of envtest's own CA; serve
// it with Env.StartWebhook. Until it serves, NodeIPPool range changes are
// refused (the range entry fails closed) and creations pass unchecked.
func WithWebhook() Option { return withWebhookConfig(deploy.ValidatingWebhook) }

// withWebhookConfig installs the webhook configuration load returns.
func withWebhookConfig(load func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error)) Option {
	return func(env *envtest.Environment) error {
		w, err := load()
		if err != nil {
			return err
		}
		env.WebhookInstallOptions.ValidatingWebhooks = append(env.WebhookInstallOptions.ValidatingWebhooks, w)
		return nil
	}
}

// WithSelfAllocateWebhook installs, beside WithWebhook's, the webhook
// configuration deploy/self-allocate adds (a self-allocating handler's
// pool status writes kept to its own node's entries), rewritten as
// WithWebhook's; Env.StartWebhook serves it.
func WithSelfAllocateWebhook() Option { return withWebhookConfig(deploy.SelfAllocateWebhook) }

// ClusterAPIModule is the Cluster API release whose CRDs WithClusterAPI
// installs.
const ClusterAPIModule = "sigs.k8s.io/cluster-api@v1.14.2"

// WithClusterAPI installs Cluster API's IPAddressClaim, IPAddress and
// Cluster CRDs, as the sigs.k8s.io/cluster-api module ships them (fetched
// through the Go module proxy into the module cache). They are served
// without Cluster API's conversion webhook: use their storage version,
// v1beta2.
func WithClusterAPI() Option {
	return WithClusterAPIAt("v1beta2")
}

// WithClusterAPIAt is WithClusterAPI as an older Cluster API release
// serves the CRDs: storage is their storage version, and no later version
// is served (v1beta1: as Cluster API up to 1.10 serves them).
func WithClusterAPIAt(storage string) Option {
	return func(env *envtest.Environment) error {
		files, err := ClusterAPICRDFiles()
		if err != nil {
			return err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(data, &crd); err != nil {
				return fmt.Errorf("read %s: %w", f, err)
			}
			if err := servedUpTo(&crd, storage); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			env.CRDInstallOptions.CRDs = append(env.CRDInstallOptions.CRDs, &crd)
		}
		return nil
	}
}

// ClusterAPICRDFiles returns the files of Cluster API's IPAddressClaim,
// IPAddress and Cluster CRDs in the module cache, downloading the module
// through the Go module proxy first if needed.
func ClusterAPICRDFiles() ([]string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", ClusterAPIModule).Output()
	if err != nil {
		return nil, fmt.Errorf("download %s for its CRDs: %w", ClusterAPIModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("download %s: no module directory in %q", ClusterAPIModule, out)
	}
	bases := filepath.Join(mod.Dir, "core", "config", "crd", "bases")
	var files []string
	for _, f := range []string{"ipam.cluster.x-k8s.io_ipaddressclaims.yaml", "ipam.cluster.x-k8s.io_ipaddresses.yaml", "cluster.x-k8s.io_clusters.yaml"} {
		files = append(files, filepath.Join(bases, f))
	}
	return files, nil
}

// servedUpTo makes storage the CRD's storage version and serves no version
// listed after it.
func servedUpTo(crd *apiextensionsv1.CustomResourceDefinition, storage string) error {
	found := false
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		v.Storage = v.Name == storage
		if found {
			v.Served = false
		}
		found = found || v.Storage
	}
	if !found {
		return fmt.Errorf("no version %s", storage)
	}
	return nil
}

// Start starts etcd and kube-apiserver and installs the CRDs of deploy/crd.
// Call Stop when done.
func Start(opts ...Option) (*Env, error) {
	dir := AssetsDir()
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run 'make envtest-assets' (it builds it from source) or set KUBEBUILDER_ASSETS", bin, dir)
		}
	}
	scheme, err := projectscheme.New()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	for _, o := range opts {
		if err := o(env); err != nil {
			return nil, err
		}
	}
	var apiserverLog *os.File
	if path := os.Getenv("TEST_LOG"); path != "" {
		// The API server's own log, beside the controllers'.
		if apiserverLog, err = os.Create(path + ".kube-apiserver"); err != nil {
			return nil, err
		}
		env.ControlPlane.GetAPIServer().Out, env.ControlPlane.GetAPIServer().Err = apiserverLog, apiserverLog
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start the envtest control plane from %s: %w", dir, err)
	}
	return &Env{Config: cfg, Scheme: scheme, env: env, apiserverLog: apiserverLog}, nil
}

// StartWebhook serves the NodeIPPool admission webhook in this process,
// where the configuration WithWebhook installed calls it, until the returned
// function is called. It returns once the webhook answers.
func (e *Env) StartWebhook() (stop func() error, err error) {
	o := &e.env.WebhookInstallOptions
	if len(o.ValidatingWebhooks) == 0 {
		return nil, errors.New("envtest: started without WithWebhook")
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: e.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", LeaderElection: false,
		WebhookServer: webhook.NewServer(webhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})})
	if err != nil {
		return nil, err
	}
	mgr.GetWebhookServer().Register(poolwebhook.Path, &webhook.Admission{Handler: &poolwebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(e.Scheme)}})
	mgr.GetWebhookServer().Register(enactmentwebhook.Path, &webhook.Admission{Handler: &enactmentwebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(e.Scheme)}})
	self, err := statuswebhook.WhoAmI(context.Background(), e.Config)
	if err != nil {
		return nil, err
	}
	mgr.GetWebhookServer().Register(statuswebhook.Path, &webhook.Admission{Handler: &statuswebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(e.Scheme), Self: self}})
	stop = RunManager(mgr)
	check := mgr.GetWebhookServer().StartedChecker()
	for deadline := time.Now().Add(30 * time.Second); check(nil) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the webhook does not answer on %s:%d", o.LocalServingHost, o.LocalServingPort), stop())
		}
	}
	return stop, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return errors.New("envtest: not started")
	}
	err := e.env.Stop()
	if e.apiserverLog != nil {
		_ = e.apiserverLog.Close()
	}
	return err
}

// Kubeconfig writes a kubeconfig for a cluster-admin user of the control
// plane to path, for processes started by tests.
func (e *Env) Kubeconfig(path string) error {
	user, err := e.env.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add a user to the control plane: %w", err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// Cluster starts a control plane with opts for one test, stopped when the
// test ends, and returns it, a client of it and the path of a
// cluster-admin kubeconfig for the processes the test runs.
func Cluster(t testing.TB, opts ...Option) (*Env, client.Client, string) {
	t.Helper()
	env, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c, kubeconfig
}
