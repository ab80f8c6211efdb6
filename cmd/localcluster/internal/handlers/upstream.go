package handlers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/pki"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/poolcontroller"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// upstreamNamespace is where kubernetes-nmstate's handlers look for their
// pods (POD_NAMESPACE), as its operator installs them.
const upstreamNamespace = "nmstate"

// upstreamPodLabel is the label kubernetes-nmstate's handler counts its
// pods by: it configures only nodes that run such a pod.
var upstreamPodLabel = map[string]string{"component": "kubernetes-nmstate-handler"}

// upstreamHandler is kubernetes-nmstate's handler, built unmodified from
// ../shared/peers (make peer-handler), one process per simulated node.
// What it needs of a node, it is given here: nmstatectl and ping (both
// nmstatectl-sim, which answers them from the node's simulated network),
// a lock file, its namespace and a Pod on the node (it counts nodes by
// their pods; the pods never run, there is no kubelet), and a DNS name
// its probe resolves without a DNS server (PROBE_DNS_HOST=localhost, from
// the hosts file). It writes the policies' status itself: the pool
// controller, whose policy controller would write it too, does not run
// beside it, but in companion mode (--companion), which leaves that
// status alone.
type upstreamHandler struct{ c *cluster }

// Prepare creates the handlers' namespace and the directory of their
// programs, and in companion mode starts the pool controller.
func (h upstreamHandler) Prepare(ctx context.Context, k client.Client) error {
	c := h.c
	if c.PeerHandler == "" {
		c.PeerHandler = filepath.Join(c.Bin, "kubernetes-nmstate-handler")
	}
	if _, err := os.Stat(c.PeerHandler); err != nil {
		return fmt.Errorf("%s not found: run 'make peer-handler' (it builds kubernetes-nmstate's handler from ../shared/peers)", c.PeerHandler)
	}
	err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upstreamNamespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", upstreamNamespace, err)
	}
	tools := c.Path("upstream-bin")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"nmstatectl", "ping"} {
		link := filepath.Join(tools, name)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(c.Bin, "nmstatectl-sim"), link); err != nil {
			return err
		}
	}
	if c.Companion {
		// Companion mode: the pool controller keeps the pooled policies'
		// NNCPs, and leaves their status to this handler.
		if err := poolcontroller.Start(ctx, c.Cluster); err != nil {
			return err
		}
		return poolcontroller.InstallWebhook(ctx, c.Cluster, pki.Keys{Dir: c.Path("pki")})
	}
	return nil
}

func upstreamPodName(node string) string { return "nmstate-handler-" + node }

// Start creates the node's handler Pod (once) and starts the handler,
// and returns once it has published the node's NodeNetworkState.
func (h upstreamHandler) Start(ctx context.Context, k client.Client, node string) error {
	c := h.c
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: upstreamPodName(node), Namespace: upstreamNamespace, Labels: upstreamPodLabel},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "nmstate-handler", Image: "quay.io/nmstate/kubernetes-nmstate-handler:simulated-by-localcluster"}}},
	}
	if err := k.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the handler pod of %s: %w", node, err)
	}
	if err := os.MkdirAll(c.Path("nodes"), 0o755); err != nil {
		return err
	}
	started := time.Now().Add(-time.Second)
	p := &process.Process{Binary: c.PeerHandler, Log: c.Path("logs", "handler-"+node+".log"), Env: []string{
		"NODE_NAME=" + node,
		"POD_NAMESPACE=" + upstreamNamespace,
		"KUBECONFIG=" + c.Kubeconfig(),
		"NMSTATE_INSTANCE_NODE_LOCK_FILE=" + c.Path("nodes", node+".lock"),
		"NMSTATECTL_SIM_STATE=" + c.SimState(node),
		"PATH=" + c.Path("upstream-bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		"PROBE_DNS_HOST=localhost",
		// Retries paced as ours in a local cluster (--retry-max-delay=5s).
		"NNCP_MAX_BACKOFF_SECONDS=5",
	}}
	if c.Retries != nil {
		// Its count is of failed attempts, the first included.
		p.Env = append(p.Env, fmt.Sprintf("NNCP_MAX_RETRIES=%d", *c.Retries+1))
	}
	// It publishes no NodeNetworkState when the node's network is the
	// one its NodeNetworkState shows (a restart): then its log says so.
	var logged int64
	if fi, err := os.Stat(p.Log); err == nil {
		logged = fi.Size()
	}
	if err := c.Launch(state.HandlerName(node), p); err != nil {
		return err
	}
	return p.Ready(ctx, 2*time.Minute, func(ctx context.Context) error {
		var nns nncev1beta1.NodeNetworkState
		if err := k.Get(ctx, client.ObjectKey{Name: node}, &nns); err != nil {
			return err
		}
		if nns.Status.LastSuccessfulUpdateTime.Time.Before(started) && !loggedSince(p.Log, logged, upstreamStateUnchanged) {
			return fmt.Errorf("the NodeNetworkState of %s is from before the handler started", node)
		}
		return nil
	})
}

// upstreamStateUnchanged is what kubernetes-nmstate's handler logs when it
// has read the node's network and found it as its NodeNetworkState shows.
const upstreamStateUnchanged = `"msg":"Skipping NodeNetworkState update`

// loggedSince reports whether the log holds s past its first offset bytes.
func loggedSince(log string, offset int64, s string) bool {
	raw, err := os.ReadFile(log)
	if err != nil || int64(len(raw)) < offset {
		return false
	}
	return strings.Contains(string(raw[offset:]), s)
}

func (h upstreamHandler) Stop(_ context.Context, _ client.Client, node string, crash bool) error {
	return h.c.stopHandler(node, crash)
}

// Gone does what the cluster does of a deleted Node's objects, once the
// Node is gone: the garbage collector deletes its enactments (owned by the
// Node) and the pod garbage collector its handler Pod. Kubernetes' garbage
// collector runs beside simulated nodes unless `up --garbage-collector=false`
// (the enactments then go twice, harmlessly); the pod garbage collector
// never does.
func (h upstreamHandler) Gone(ctx context.Context, k client.Client, node string) error {
	err := k.DeleteAllOf(ctx, &nncev1beta1.NodeNetworkConfigurationEnactment{},
		client.MatchingLabels{shared.EnactmentNodeLabel: node})
	if err != nil {
		return fmt.Errorf("delete the enactments of node %s: %w", node, err)
	}
	return h.deletePod(ctx, k, node)
}

// deletePod deletes a node's handler Pod at once: no kubelet confirms it.
func (upstreamHandler) deletePod(ctx context.Context, k client.Client, node string) error {
	err := k.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: upstreamPodName(node), Namespace: upstreamNamespace}},
		client.GracePeriodSeconds(0))
	return client.IgnoreNotFound(err)
}

// Retire deletes the handler Pods, as deleting the handler's DaemonSet
// would.
func (h upstreamHandler) Retire(ctx context.Context, k client.Client) error {
	err := k.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(upstreamNamespace),
		client.MatchingLabels(upstreamPodLabel), client.GracePeriodSeconds(0))
	if err != nil {
		return fmt.Errorf("delete the handler pods: %w", err)
	}
	if h.c.Companion {
		return poolcontroller.Stop(ctx, h.c.Cluster, k)
	}
	return nil
}
