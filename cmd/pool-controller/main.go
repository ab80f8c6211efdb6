// Command pool-controller is the control-plane NodeIPPool controller: it
// rebuilds pools from the enactments, opens them to the handlers
// (Available=True) and refuses overlapping or colliding ones. Run two
// replicas; leader election keeps one active.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/scheme"
)

func main() {
	var (
		metricsAddr, healthAddr, leaseNamespace string
		leaderElection                          bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8090", "address of the Prometheus metrics endpoint; 0 disables it")
	flag.StringVar(&healthAddr, "health-probe-bind-address", ":8082", "address of the /healthz and /readyz endpoints; 0 disables them")
	flag.BoolVar(&leaderElection, "leader-elect", true, "elect a leader so that one replica is active")
	flag.StringVar(&leaseNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the pod's namespace)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(metricsAddr, healthAddr, leaderElection, leaseNamespace); err != nil {
		ctrl.Log.Error(err, "pool controller stopped")
		os.Exit(1)
	}
}

func run(metricsAddr, healthAddr string, leaderElection bool, leaseNamespace string) error {
	s, err := scheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  healthAddr,
		LeaderElection:          leaderElection,
		LeaderElectionID:        "nmstate-ippool-pool-controller",
		LeaderElectionNamespace: leaseNamespace,
	})
	if err != nil {
		return fmt.Errorf("create the manager: %w", err)
	}
	if err := pool.New(mgr).SetupWithManager(mgr, false); err != nil {
		return fmt.Errorf("set up the pool controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("starting pool controller", "leaderElection", leaderElection)
	return mgr.Start(ctrl.SetupSignalHandler())
}
