package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	projectscheme "github.com/nmstate-ippool/nmstate-ippool/internal/scheme"
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

// Start starts etcd and kube-apiserver and installs the CRDs of deploy/crd.
// Call Stop when done.
func Start() (*Env, error) {
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
