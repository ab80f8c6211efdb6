package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// syncBuffer collects a process's output while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHandlerProcess runs the handler binary, as a DaemonSet would, against
// a real API server with the simulator as nmstatectl: it allocates, applies,
// and logs the allocation with everything an admin searches for.
func TestHandlerProcess(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range []string{"handler", "nmstatectl-sim"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "../"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	k, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The control plane's policy controller grants the slot to apply.
	stopPolicies, err := env.StartPolicyAndEnactmentControllers()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopPolicies() })
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node01", Labels: map[string]string{"role": "worker"}}}
	mustCreate(t, k, node)
	// The handler runs its default probes: node-readiness needs the Node
	// Ready, as a kubelet reports it.
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := k.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "traffic-1"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.10.10.0/24", Start: "10.10.10.1", End: "10.10.10.10"}}}
	mustCreate(t, k, pool)
	meta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: ippoolv1.ReasonReconciledPool})
	pool.Status.Stamp = poolstatus.Stamp(pool) // as the pool controller vouches after a rebuild
	if err := k.Status().Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	policy := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "static-ip"}}
	policy.Spec.NodeSelector = map[string]string{"role": "worker"}
	policy.Spec.Capture = map[string]string{"addr": "ippool.traffic-1.allocate"}
	policy.Spec.DesiredState = shared.NewState("interfaces:\n- name: eth1\n  ipv4:\n    address:\n    - ip: \"{{ capture.addr.ip }}\"\n      prefix-length: \"{{ capture.addr.prefix-length }}\"\n")
	mustCreate(t, k, policy)

	var logs syncBuffer
	cmd := exec.Command(filepath.Join(dir, "handler"), "--kubeconfig", kubeconfig, "--nmstatectl", filepath.Join(dir, "nmstatectl-sim"),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		// No pool controller runs here: the handler takes its address
		// itself, as the specification describes.
		"--self-allocate", "--metrics-secure=false")
	cmd.Env = append(os.Environ(), "NODE_NAME=node01", "NMSTATECTL_SIM_STATE="+filepath.Join(dir, "node01.yaml"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	deadline := time.Now().Add(60 * time.Second)
	for !enactmentAvailable(ctx, k) {
		if time.Now().After(deadline) {
			var e nncev1beta1.NodeNetworkConfigurationEnactment
			_ = k.Get(ctx, shared.EnactmentKey("node01", "static-ip"), &e)
			t.Fatalf("the enactment did not become Available: %+v\nhandler output:\n%s", e.Status, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	allocation := findLog(t, logs.String(), "allocated address")
	for key, want := range map[string]string{"pool": "traffic-1", "node": "node01", "policy": "static-ip", "capture": "addr", "ip": "10.10.10.1"} {
		if got := fmt.Sprint(allocation[key]); got != want {
			t.Errorf("allocation log %s = %q, want %q: %v", key, got, want, allocation)
		}
	}
	if _, ok := allocation["attempts"]; !ok {
		t.Errorf("allocation log lacks attempts: %v", allocation)
	}
	// The NodeNetworkState, refreshed after the apply, shows the address
	// and the handler's nmstate version.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var nns nncev1beta1.NodeNetworkState
		err := k.Get(ctx, client.ObjectKey{Name: "node01"}, &nns)
		if err == nil && strings.Contains(string(nns.Status.CurrentState.Raw), "10.10.10.1") &&
			strings.HasPrefix(nns.Status.HandlerNmstateVersion, "nmstatectl-sim ") && !nns.Status.LastSuccessfulUpdateTime.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the NodeNetworkState does not show the applied state and the nmstate version: %v %+v", err, nns.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mustCreate(t *testing.T, k client.Client, o client.Object) {
	t.Helper()
	if err := k.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func enactmentAvailable(ctx context.Context, k client.Client) bool {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := k.Get(ctx, shared.EnactmentKey("node01", "static-ip"), &e); err != nil {
		return false
	}
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionAvailable)
	return c != nil && c.Status == corev1.ConditionTrue
}

// findLog returns the first JSON log line with the message msg.
func findLog(t *testing.T, logs, msg string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == msg {
			return entry
		}
	}
	t.Fatalf("no %q log line in:\n%s", msg, logs)
	return nil
}

func TestFlagsValidate(t *testing.T) {
	good := options{node: "node01", retries: 5, retryInitial: time.Second, retryMax: 30 * time.Second,
		probeTimeout: 2 * time.Minute, applyTimeout: 8 * time.Minute, unserved: 2 * time.Minute}
	if err := good.validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for name, tt := range map[string]struct {
		change func(*options)
		want   string
	}{
		"no node":              {func(o *options) { o.node = "" }, "no node name: set --node-name or $NODE_NAME"},
		"negative retries":     {func(o *options) { o.retries = -1 }, "want retries >= 0"},
		"max below initial":    {func(o *options) { o.retryMax = time.Millisecond }, "0 < initial delay <= max delay"},
		"checkpoint too short": {func(o *options) { o.applyTimeout = 3 * time.Minute }, "--apply-timeout 3m0s must exceed twice --probe-timeout 2m0s"},
		"no unserved warning":  {func(o *options) { o.unserved = 0 }, "--unserved-warning 0s: want a positive duration"},
	} {
		o := good
		tt.change(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", name, err, tt.want)
		}
	}
}
