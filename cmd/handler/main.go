// Command handler is the per-node nmstate-ippool handler: it reconciles
// NodeNetworkConfigurationPolicies for the node it runs on, allocating
// addresses from NodeIPPools and applying the rendered state with
// nmstatectl, and publishes the node's NodeNetworkState. It replaces the kubernetes-nmstate handler; never run both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/nodestate"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/metricsauth"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/nmstatectl"
)

type options struct {
	node           string
	nmstatectl     string
	applyTimeout   time.Duration
	metrics        metricsauth.Flags
	healthAddr     string
	pendingRequeue time.Duration
	failedRequeue  time.Duration
	unserved       time.Duration
	stateRefresh   time.Duration
	selfAllocate   bool
	probes         string
	probeTimeout   time.Duration
	retries        int
	retryInitial   time.Duration
	retryMax       time.Duration
	clockOffset    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "the node this handler configures (default $NODE_NAME)")
	flag.StringVar(&o.nmstatectl, "nmstatectl", "nmstatectl", "path of the nmstatectl binary (or of nmstatectl-sim)")
	flag.DurationVar(&o.applyTimeout, "apply-timeout", nmstatectl.DefaultTimeout,
		"checkpoint timeout of nmstatectl apply: an apply not committed by then is rolled back by nmstate; must exceed twice --probe-timeout")
	flag.StringVar(&o.probes, "probes", "ping,dns,api-server,node-readiness",
		"the probes run after an apply, before it is committed (comma-separated; empty for none); ping and dns run only if they passed before the apply")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", probe.DefaultTimeout, "how long each probe is polled after an apply before the apply is rolled back")
	flag.IntVar(&o.retries, "retries", handler.DefaultRetry.Steps, "how many times an attempt to configure a policy that failed is retried")
	flag.DurationVar(&o.retryInitial, "retry-initial-delay", handler.DefaultRetry.Duration, "the delay before the first retry; it doubles with each")
	flag.DurationVar(&o.retryMax, "retry-max-delay", handler.DefaultRetry.Cap, "the longest delay between two retries")
	o.metrics.Bind(flag.CommandLine, ":8089")
	flag.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints; 0 disables them")
	flag.DurationVar(&o.pendingRequeue, "pending-requeue", handler.DefaultPendingRequeue,
		"how often an enactment whose pool is not Available=True (Pending/IPPoolNotAvailable: being rebuilt, overlapping, status not vouched for) "+
			"is looked at again; the pool controller nudges it sooner when the pool can serve")
	flag.DurationVar(&o.failedRequeue, "failed-requeue", handler.DefaultFailedRequeue,
		"how long an enactment that cannot go on waits before its handler looks again: a full, missing or invalid pool (IPPoolExhausted, "+
			"IPPoolNotFound, IPPoolInvalid) or a template the pool cannot fill (InvalidCapture); and how long it waits for the pool controller "+
			"to serve it before asking again (or, with --self-allocate, allocating itself). The pool controller nudges a waiting enactment "+
			"sooner when its pool can serve. A failed apply is retried per --retries and --retry-*-delay instead")
	flag.DurationVar(&o.unserved, "unserved-warning", handler.DefaultUnservedWarning,
		"how long an enactment asks the pool controller for addresses before a Warning Event (NotServed) says the controller may not run")
	flag.BoolVar(&o.selfAllocate, "self-allocate", false,
		"take new addresses from pools directly, writing their status (the kubernetes-nmstate proposal's handler allocation; needs the RBAC of deploy/self-allocate); by default the handler never writes a pool and the pool controller allocates for every waiting node in one pool write")
	flag.DurationVar(&o.stateRefresh, "state-refresh-period", nodestate.DefaultRefresh,
		"how often the node's network state is read when nothing asks for it (±10%); the NodeNetworkState is written when the state changed, "+
			"and whenever the pool controller asks for a fresh one")
	flag.DurationVar(&o.clockOffset, "test-clock-offset", 0,
		"for tests only: move the handler's clock by this much, to show that nothing depends on the node's clock agreeing with the control plane's")
	zapOpts := zap.Options{}
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // controller-runtime registers --kubeconfig
	if *showVersion {
		fmt.Println("handler", version.Get())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(o); err != nil {
		ctrl.Log.Error(err, "handler stopped")
		os.Exit(1)
	}
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	s, err := scheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 s,
		Metrics:                o.metrics.Options(),
		HealthProbeBindAddress: o.healthAddr,
		Cache:                  handler.CacheOptions(o.node),
	})
	if err != nil {
		return fmt.Errorf("create the manager: %w", err)
	}
	metrics := handler.NewMetrics()
	ctrlmetrics.Registry.MustRegister(append(metrics.Collectors(), version.Collector("handler"))...)
	network := nmstatectl.Runner{Path: o.nmstatectl, Timeout: o.applyTimeout}
	refreshes := nodestate.NewRefreshes()
	r, err := o.handler(mgr, network, metrics)
	if err != nil {
		return err
	}
	r.StateChanged = func() { refreshes.Refresh(o.node) }
	r.NetworkLock = &sync.Mutex{}
	if err := r.SetupWithManager(mgr, handler.SetupOptions{}); err != nil {
		return fmt.Errorf("set up the handler: %w", err)
	}
	reporter := nodestate.New(mgr, o.node, network)
	reporter.Refresh = o.stateRefresh
	if reporter.Version, err = network.Version(context.Background()); err != nil {
		ctrl.Log.Info("could not read the nmstate version; the NodeNetworkState will not show it", "error", err.Error())
	}
	reporter.NetworkLock, reporter.Settle, reporter.Clock = r.NetworkLock, r.Settle, r.Clock
	r.StatePublished = reporter.Published
	if err := reporter.SetupWithManager(mgr, refreshes, nodestate.SetupOptions{}); err != nil {
		return fmt.Errorf("set up the NodeNetworkState reporter: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("starting handler", append([]any{"node", o.node, "nmstatectl", o.nmstatectl}, version.Get().KeysAndValues()...)...)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// validate checks the flags that depend on each other.
func (o options) validate() error {
	if o.node == "" {
		return errors.New("no node name: set --node-name or $NODE_NAME (from the downward API's spec.nodeName)")
	}
	if o.retries < 0 || o.retryInitial <= 0 || o.retryMax < o.retryInitial {
		return fmt.Errorf("--retries %d, --retry-initial-delay %s, --retry-max-delay %s: want retries >= 0 and 0 < initial delay <= max delay",
			o.retries, o.retryInitial, o.retryMax)
	}
	if o.unserved <= 0 {
		return fmt.Errorf("--unserved-warning %s: want a positive duration", o.unserved)
	}
	if o.probeTimeout <= 0 || o.applyTimeout <= 2*o.probeTimeout {
		return fmt.Errorf("--apply-timeout %s must exceed twice --probe-timeout %s (probes run after the apply and again after a rollback), which must be positive",
			o.applyTimeout, o.probeTimeout)
	}
	return nil
}

// handler returns the node's handler tuned by the flags.
func (o options) handler(mgr ctrl.Manager, network nmstatectl.Runner, metrics *handler.Metrics) (*handler.Reconciler, error) {
	r := handler.New(mgr, o.node, network, metrics)
	r.PendingRequeue, r.FailedRequeue, r.UnservedWarning = o.pendingRequeue, o.failedRequeue, o.unserved
	r.Retry.Steps, r.Retry.Duration, r.Retry.Cap = o.retries, o.retryInitial, o.retryMax
	var err error
	if r.Probes.Probes, err = probe.Select(r.Probes.Probes, strings.Split(o.probes, ",")); err != nil {
		return nil, fmt.Errorf("--probes: %w", err)
	}
	r.Probes.Timeout = o.probeTimeout
	r.SelfAllocate = o.selfAllocate
	if o.clockOffset != 0 {
		r.Clock = offsetClock{offset: o.clockOffset}
		r.Pools.Clock = r.Clock
	}
	return r, nil
}

// offsetClock is the real clock moved by offset (--test-clock-offset).
type offsetClock struct {
	clock.RealClock
	offset time.Duration
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
