package envtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// LocalClusterClient returns a client, with the project's scheme, of the
// local cluster whose directory is dir (localcluster --dir).
func LocalClusterClient(dir string) (client.WithWatch, error) {
	cfg, err := LocalClusterConfig(dir)
	if err != nil {
		return nil, err
	}
	return ClientFor(cfg)
}

// LocalClusterConfig returns the admin's configuration of the local
// cluster whose directory is dir.
func LocalClusterConfig(dir string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	// The suites read Warnings where they expect them (a webhook's); a
	// client-wide handler would log them through a logger nobody set.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

// ClientFor returns a client of cfg with the project's scheme.
func ClientFor(cfg *rest.Config) (client.WithWatch, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: s})
}

// PrintLogTails writes the last lines of every log of the local cluster
// in dir but those skip names, for a failed spec's report: on a CI machine
// they are all there is to read.
func PrintLogTails(w io.Writer, dir string, lines int, skip func(name string) bool) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, log := range logs {
		if skip(filepath.Base(log)) {
			continue
		}
		raw, err := os.ReadFile(log)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		fmt.Fprintf(w, "--- last lines of %s ---\n%s\n", filepath.Base(log), strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
}
