package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/install"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

func cmdInstall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := install.Options{}
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&o.Overlay, "overlay", filepath.Join("deploy", "local"), "the kustomize directory to apply")
		fs.StringVar(&o.Kubectl, "kubectl", filepath.Join(exeDir(), "kubectl"), "the kubectl to apply it with")
		fs.StringVar(&o.CertManagerCRDs, "cert-manager-crds", filepath.Join("deploy", "testdata", "cert-manager-crds.yaml"),
			"stand-ins for cert-manager's CRDs, so that the install's Issuer and Certificate are accepted")
		fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "how long to wait for the handler and pool controller pods")
		fs.StringVar(&o.Helm, "helm", "", "install this Helm chart (deploy/helm/nmstate-ippool) instead of the overlay, with helm upgrade --install")
		fs.StringVar(&o.HelmBin, "helm-bin", filepath.Join(exeDir(), "helm"), "with --helm: the helm to install it with")
		fs.StringVar(&o.Values, "values", filepath.Join("deploy", "local", "helm-values.yaml"), "with --helm: the chart's values for the local cluster")
		fs.StringVar(&o.Namespace, "namespace", "nmstate-ippool", "with --helm: the release's namespace")
	}
	return withCluster(args, "install", stderr, flags, func(c *state.Cluster, _ []string) error {
		if c.Real == nil {
			return fmt.Errorf("%w: install runs the handler and the pool controller as pods, on real nodes: start the cluster with 'localcluster up --kubelets K' (a simulated cluster runs them as processes already)", cli.ErrUsage)
		}
		return install.Run(ctx, c, o, stdout)
	})
}
