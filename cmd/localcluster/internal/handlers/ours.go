package handlers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/poolcontroller"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// handlerTuning returns the handler flags of a local cluster: quicker
// retries and probes than in production, and no ping or dns probe: the
// simulated nodes' gateway and nameserver exist only in their states, so
// those probes would fail before every apply and be skipped, after a
// wait.
func (c *cluster) handlerTuning() []string {
	flags := []string{"--pending-requeue=2s", "--failed-requeue=10s", "--retry-max-delay=5s",
		"--probes=api-server,node-readiness", "--probe-timeout=20s", "--apply-timeout=60s"}
	if c.Retries != nil {
		flags = append(flags, fmt.Sprintf("--retries=%d", *c.Retries))
	}
	if c.SelfAllocate {
		flags = append(flags, "--self-allocate")
	}
	return flags
}

// ourHandler is nmstate-ippool's handler, one process per simulated node.
type ourHandler struct{ c *cluster }

// Prepare starts the pool controller and installs its webhook: our
// handlers ask it for addresses, and its policy controller writes the
// policies' status.
func (h ourHandler) Prepare(ctx context.Context, _ client.Client) error {
	if err := poolcontroller.Start(ctx, h.c.Cluster); err != nil {
		return err
	}
	return poolcontroller.InstallWebhook(ctx, h.c.Cluster, pki.Keys{Dir: h.c.Path("pki")})
}

// Start starts the handler of a node and waits until it is ready.
func (h ourHandler) Start(ctx context.Context, _ client.Client, node string) error {
	c := h.c
	if err := os.MkdirAll(c.Path("nodes"), 0o755); err != nil {
		return err
	}
	health, err := process.FreePort()
	if err != nil {
		return err
	}
	p := &process.Process{Binary: filepath.Join(c.Bin, "handler"), Log: c.Path("logs", "handler-"+node+".log"),
		Health: "http://" + process.HostPort(health) + "/readyz",
		Env:    []string{"NMSTATECTL_SIM_STATE=" + c.SimState(node)},
		Args: append([]string{"--kubeconfig=" + c.Kubeconfig(), "--node-name=" + node,
			"--nmstatectl=" + filepath.Join(c.Bin, "nmstatectl-sim"),
			"--health-probe-bind-address=" + process.HostPort(health), "--metrics-bind-address=0"}, c.handlerTuning()...)}
	if offset := c.ClockOffsets[node]; offset != "" {
		p.Args = append(p.Args, "--test-clock-offset="+offset)
	}
	if err := c.Launch(state.HandlerName(node), p); err != nil {
		return err
	}
	return p.Ready(ctx, time.Minute, process.HTTPReady(p.Health))
}

func (h ourHandler) Stop(_ context.Context, _ client.Client, node string, crash bool) error {
	return h.c.stopHandler(node, crash)
}

// Gone does nothing: the pool controller retires a deleted Node's
// enactments and frees their addresses.
func (ourHandler) Gone(context.Context, client.Client, string) error { return nil }

// Retire stops the pool controller and removes its webhook, which no one
// would answer; the pools and the enactments' records stay.
func (h ourHandler) Retire(ctx context.Context, k client.Client) error {
	return poolcontroller.Stop(ctx, h.c.Cluster, k)
}

// stopHandler stops a node's handler process: SIGTERM, or SIGKILL with
// crash.
func (c *cluster) stopHandler(node string, crash bool) error {
	sig := syscall.SIGTERM
	if crash {
		sig = syscall.SIGKILL
	}
	return c.Processes[state.HandlerName(node)].Stop(sig, 15*time.Second)
}
