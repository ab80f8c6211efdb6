package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

func TestCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	simulated := t.TempDir() // a cluster's state with simulated nodes
	if err := os.WriteFile(filepath.Join(simulated, state.StateFile), []byte(`{"processes": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	real := t.TempDir() // and with real nodes
	if err := os.WriteFile(filepath.Join(real, state.StateFile), []byte(`{"processes": {}, "real": {"nodes": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badBackup := filepath.Join(dir, "backup.yaml")
	if err := os.WriteFile(badBackup, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"up", "--nodes", "501", "--dir", dir}, 2, "--nodes 501: give 0 to 500"},
		{[]string{"up", "--gc-grace-period", "1s", "--dir", dir}, 2, "--gc-grace-period 1s: give at least 3s"},
		{[]string{"up", "--quarantine-period", "0s", "--dir", dir}, 2, "--quarantine-period 0s is too short"},
		{[]string{"up", "--controllers", "0", "--dir", dir}, 2, "--controllers 0: give 1 to 3"},
		{[]string{"up", "--self-allocate", "--handler", "upstream", "--dir", dir}, 2, "--self-allocate is a flag of our handler on simulated nodes"},
		{[]string{"up", "--kubelets", "300", "--dir", dir}, 2, "--kubelets 300: give 0 to 200"},
		{[]string{"up", "--kubelets", "2", "--nodes", "3", "--dir", dir}, 2, "--nodes 3 with --kubelets 2: a cluster's nodes are all simulated or all real"},
		{[]string{"up", "--handler", "theirs", "--dir", dir}, 2, `--handler "theirs": give one of ours, upstream`},
		{[]string{"up", "--kubelets", "2", "--handler", "upstream", "--dir", dir}, 2, "--handler upstream runs on simulated nodes"},
		{[]string{"handler", "use", "theirs", "--dir", simulated}, 2, "handler use needs one of ours, upstream"},
		{[]string{"handler", "use", "ours", "--dir", simulated}, 1, "the nodes already run nmstate-ippool's handler"},
		{[]string{"handler", "use", "upstream", "--dir", real}, 1, "the handler of real nodes is a pod of the install"},
		{[]string{"node", "add", "r1", "--dir", real}, 2, "this cluster's nodes are real: add node r1 with --kubelet"},
		{[]string{"install", "--dir", dir}, 1, "no local cluster in " + dir},
		{[]string{"install", "--dir", simulated}, 2, "install runs the handler and the pool controller as pods, on real nodes"},
		{[]string{"node", "add", "n1", "--kubelet", "--dir", simulated}, 2, "--kubelet: this cluster's nodes are simulated"},
		{[]string{"controller", "restart", "--dir", real}, 1, "the pool controller of a cluster with real nodes runs as pods"},
		{[]string{"node"}, 2, "node needs add, remove, restart, stall, resume, stop, start"},
		{[]string{"up", "--node-grace-period", "1s", "--dir", dir}, 2, "--node-grace-period 1s: give at least 5s"},
		{[]string{"controller"}, 2, "controller needs restart"},
		{[]string{"apiserver", "stop"}, 2, "apiserver needs restart"},
		{[]string{"node", "stall", "n1", "--dir", dir}, 1, "no local cluster in " + dir},
		{[]string{"node", "add", "--dir", dir}, 2, "node add takes 1 argument(s), got 0"},
		{[]string{"node", "add", "n1", "--label", "novalue", "--dir", dir}, 2, `label "novalue": write key=value`},
		{[]string{"etcd", "snapshot", "../x", "--dir", simulated}, 2, `"../x" is not a snapshot name`},
		{[]string{"etcd", "restore", "a/b", "--dir", simulated}, 2, `"a/b" is not a snapshot name`},
		{[]string{"restore", badBackup, "--dir", simulated}, 1, badBackup + " is not a backup this cluster can restore, and nothing was changed: " +
			`document 1 is a Secret of v1, "s", which a backup does not hold (it holds NodeIPPool of nmstate.io/v1,`},
		{[]string{"status", "--dir", dir}, 1, "no local cluster in " + dir + ": run 'localcluster up' first"},
		{[]string{"up", "--dir", dir, "--bin", dir, "--assets", filepath.Join(dir, "k8s")}, 1, filepath.Join(dir, "k8s", "etcd") + " not found: run 'make build envtest-assets'"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errOut)
		if code != tt.code || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, errOut.String(), tt.code, tt.want)
		}
	}
}
