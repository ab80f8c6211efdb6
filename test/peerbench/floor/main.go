// Command floor is the least a Kubernetes controller built on
// controller-runtime is: a manager with one metadata-only watch of Nodes
// and a reconciler that does nothing, its metrics and health endpoints
// off. make bench-peer runs one beside the handlers and reports its
// resident memory as the floor of theirs (docs/benchmarks.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func main() {
	flag.Parse() // --kubeconfig, which controller-runtime defines
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	nothing := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := ctrl.NewControllerManagedBy(mgr).Named("floor").For(&corev1.Node{}, builder.OnlyMetadata).Complete(nothing); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mgr.Start(ctx)
}
