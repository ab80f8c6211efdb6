// Command pool-controller is the control-plane NodeIPPool controller. It
// rebuilds pools from their holders' records and opens them to the handlers
// (Available=True), refuses overlapping or colliding ones, acts on reset
// annotations, retires deleted enactments and those of deleted nodes
// (handler mode), quarantines every address given back and frees it on
// evidence, and garbage-collects addresses no record of any kind claims. It
// serves Cluster API IPAddressClaims when their CRDs are installed, and
// pooled policies, keeping their NNCPs, when their CRD is installed (in
// either mode; companion mode relies on them). Run two replicas; leader
// election keeps one active.
//
// --mode handler (the default) runs beside this project's handler: it also
// writes the NNCPs' status and maxUnavailable slots and retires
// enactments. --mode companion runs beside kubernetes-nmstate's handler,
// which writes those itself: it leaves them alone.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/claim"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/companion"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/enactment"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/admissionpolicies"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/enactmentwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/poolwebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/admission/statuswebhook"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/periods"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/metricsauth"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version"
)

type options struct {
	metrics                       metricsauth.Flags
	healthAddr, leaseNamespace    string
	keyNamespace, keySecret       string
	leaderElection                bool
	gracePeriod, quarantinePeriod time.Duration
	departureHold                 time.Duration
	departureHoldSet              bool // --departure-hold was given: it must not exceed the quarantine period
	webhookPort                   int
	webhookHost, webhookCertDir   string
	mode                          string
	requireAdmission              bool
	holdCarried                   bool
}

// The modes of --mode.
const (
	modeHandler   = "handler"
	modeCompanion = "companion"
)

func main() {
	var o options
	o.metrics.Bind(flag.CommandLine, ":8090")
	flag.StringVar(&o.healthAddr, "health-probe-bind-address", ":8082", "address of the /healthz and /readyz endpoints; 0 disables them")
	flag.BoolVar(&o.leaderElection, "leader-elect", true, "elect a leader so that one replica is active")
	flag.StringVar(&o.leaseNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the pod's namespace)")
	flag.DurationVar(&o.gracePeriod, "gc-grace-period", periods.DefaultGrace,
		"how long a set bit that no record, in-flight entry or quarantine holds may stay before garbage collection frees it (or quarantines it, "+
			"if a node's network carries it), and how long a taken address may stay unrecorded before it is settled (an enactment's or pooled policy's entry revoked, its holder "+
			"fenced first; a claim's kept while its IPAddress may still come, then dropped and its bit left to garbage collection)")
	flag.DurationVar(&o.quarantinePeriod, "quarantine-period", periods.DefaultQuarantine,
		"how long an address taken from its holder (release, reset, node removal) may stay quarantined before the pool reports it overdue "+
			"(ReleasesConfirmed=False, a Warning Event); no timer frees it: it stays quarantined, handed to nobody, until the holder's "+
			"NodeNetworkState shows it gone, or its Node is gone and the departure hold has passed. It also sets how long a departed node's address is kept for its return, "+
			"and caps --departure-hold")
	flag.DurationVar(&o.departureHold, "departure-hold", periods.DefaultDepartureHold,
		"how long the quarantined addresses of a deleted Node wait, counted from their release, before they are freed and kept for its return, "+
			"and the addresses its last NodeNetworkState shows that no holder records are handed to no one, counted from the Node's deletion: "+
			"time for its machine, if it still runs, to take them off; 0 if Nodes are only deleted once their machines are gone. It may not be set above "+
			"--quarantine-period (refused at start-up); the default is capped at a shorter --quarantine-period")
	flag.StringVar(&o.keyNamespace, "signing-key-namespace", "", "namespace of the Secret holding the key the IPAddresses it makes "+
		"for claims are signed with (default: the leader election namespace, else the pod's); created when missing. Outside a pod "+
		"and without either, a key is made for the process's lifetime, and each claim signs its IPAddress again after a restart")
	flag.StringVar(&o.keySecret, "signing-key-secret", capi.DefaultKeySecret, "name of that Secret")
	flag.IntVar(&o.webhookPort, "webhook-port", 9443, "port of the pool controller's admission webhooks "+
		"(NodeIPPool changes and enactment names, deploy/webhook; self-allocating handlers' pool writes, deploy/self-allocate); 0 disables them")
	flag.StringVar(&o.webhookHost, "webhook-host", "", "address the webhook listens on (default: every address)")
	flag.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"directory holding the webhook's serving certificate, tls.crt and tls.key (reloaded when they change)")
	flag.StringVar(&o.mode, "mode", modeHandler, "handler: beside nmstate-ippool's handler; companion: beside kubernetes-nmstate's handler "+
		"(no policy status, no enactment retirement: that handler does them)")
	zapOpts := zap.Options{}
	flag.BoolVar(&o.requireAdmission, "require-admission-policies", false, "companion mode: be ready only while the admission policies of deploy/companion "+
		"and their identity bindings, naming this pool controller's service account, are installed: for an install that cannot carry them "+
		"and leaves them to the admin (the OLM bundle, deploy/olm/admission)")
	flag.BoolVar(&o.holdCarried, "hold-carried-addresses", false, "each time a node publishes its NodeNetworkState, quarantine for that "+
		"node every free address of a pool it carries that no holder records, so that no other node is given it (an address set by hand, "+
		"or applied after the backup or snapshot a pool was restored from), and hold the same way, instead of freeing it, an address a live node "+
		"carries when its release is lifted, its entry revoked or its keeping for a return expires: for handlers run with --self-allocate, which do not look at what "+
		"other nodes carry when they take a new address (deploy/self-allocate sets it); the pool controller's own serving passes such addresses by without it")
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println("pool-controller", version.Get())
		return
	}
	o.departureHoldSet = given(flag.CommandLine, "departure-hold")
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(o); err != nil {
		ctrl.Log.Error(err, "pool controller stopped")
		os.Exit(1)
	}
}

// given reports whether the command line set the flag name, even to its
// default.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// check refuses flags that do not go together.
func (o options) check() error {
	if err := periods.Check(o.gracePeriod, o.quarantinePeriod, o.departureHold); err != nil {
		return err
	}
	if o.departureHoldSet && o.departureHold > o.quarantinePeriod {
		return fmt.Errorf("--departure-hold %s is longer than --quarantine-period %s, which caps it: set it to %s or less, or raise --quarantine-period",
			o.departureHold, o.quarantinePeriod, o.quarantinePeriod)
	}
	if o.mode != modeHandler && o.mode != modeCompanion {
		return fmt.Errorf("--mode %q: write %s or %s", o.mode, modeHandler, modeCompanion)
	}
	if o.requireAdmission && o.mode != modeCompanion {
		return fmt.Errorf("--require-admission-policies checks companion mode's policies: run with --mode=%s", modeCompanion)
	}
	return nil
}

// registerWebhooks registers the admission webhooks with the manager,
// which runs their server once asked for it, and returns the readiness
// check of a replica: ready once the server serves, since the Service
// sends admission requests only to ready replicas.
func registerWebhooks(ctx context.Context, mgr ctrl.Manager, signer *capi.Signer) (healthz.Checker, error) {
	server := mgr.GetWebhookServer()
	server.Register(poolwebhook.Path, &webhook.Admission{Handler: &poolwebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(mgr.GetScheme()), Signer: signer}})
	server.Register(enactmentwebhook.Path, &webhook.Admission{Handler: &enactmentwebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(mgr.GetScheme())}})
	self, err := statuswebhook.WhoAmI(ctx, mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	server.Register(statuswebhook.Path, &webhook.Admission{Handler: &statuswebhook.Validator{
		Reader: mgr.GetAPIReader(), Decoder: admission.NewDecoder(mgr.GetScheme()), Self: self}})
	return server.StartedChecker(), nil
}

func run(o options) error {
	if err := o.check(); err != nil {
		return err
	}
	mgr, webhooks, err := newManager(o)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	metrics := pool.NewMetrics()
	ctrlmetrics.Registry.MustRegister(append(metrics.Collectors(), version.Collector("pool-controller"))...)
	if o.mode == modeHandler {
		// Every replica reports them, from its own cache: aggregate with
		// max. Beside kubernetes-nmstate's handler, its own metrics
		// report them, and this process keeps the policies as metadata
		// only (companion, policymeta).
		ctrlmetrics.Registry.MustRegister(policy.NewStatusMetrics(mgr.GetCache()))
	}
	pools := pool.New(mgr, metrics)
	metrics.Writes.Count(pools.Pools)
	pools.GracePeriod, pools.QuarantinePeriod, pools.DepartureHold = o.gracePeriod, o.quarantinePeriod, o.departureHold
	pools.HoldCarried = o.holdCarried
	pools.ServeEnactments = o.mode == modeHandler
	// One watch of what the nodes carry, for every controller that hands
	// addresses out.
	if pools.Carried, err = carriers.Watch(mgr, mgr.GetAPIReader()); err != nil {
		return err
	}
	if pools.IPAMVersion, pools.Signer, err = setUpClaims(ctx, mgr, o, metrics, pools.Carried); err != nil {
		return err
	}
	if pools.PooledPolicies, err = setUpPooledPolicies(mgr, metrics, o.mode == modeCompanion, pools.Carried); err != nil {
		return err
	}
	if err := pools.SetupWithManager(ctx, mgr, pool.SetupOptions{}); err != nil {
		return fmt.Errorf("set up the pool controller: %w", err)
	}
	if o.mode == modeHandler {
		if err := setUpHandlerMode(ctx, mgr, metrics); err != nil {
			return err
		}
	}
	ready := healthz.Ping
	if webhooks != nil {
		if ready, err = registerWebhooks(ctx, mgr, pools.Signer); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return err
	}
	if o.requireAdmission {
		if err := setUpAdmissionCheck(ctx, mgr); err != nil {
			return err
		}
	}
	ctrl.Log.Info("starting pool controller", append([]any{"mode", o.mode, "leaderElection", o.leaderElection, "gcGracePeriod", o.gracePeriod.String(),
		"quarantinePeriod", o.quarantinePeriod.String(), "departureHold", min(o.departureHold, o.quarantinePeriod).String(), "webhookPort", o.webhookPort,
		"holdCarriedAddresses", o.holdCarried},
		version.Get().KeysAndValues()...)...)
	return mgr.Start(ctx)
}

// setUpAdmissionCheck runs the check of the admission boundary
// (--require-admission-policies), which the pool controller's readiness
// waits for.
func setUpAdmissionCheck(ctx context.Context, mgr ctrl.Manager) error {
	self, err := statuswebhook.WhoAmI(ctx, mgr.GetConfig())
	if err != nil {
		return err
	}
	subject, err := admissionpolicies.ServiceAccount(self)
	if err != nil {
		return err
	}
	policies, err := deploy.CompanionAdmissionPolicies()
	if err != nil {
		return err
	}
	checker := &admissionpolicies.Checker{Reader: mgr.GetAPIReader(), Subject: subject, Policies: policies,
		Hint: fmt.Sprintf("apply deploy/olm/admission with namespace %s (kubectl apply -k an overlay that sets it; docs/olm.md)", subject.Namespace)}
	if err := mgr.Add(checker); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("admission-policies", checker.Ready)
}

// setUpHandlerMode starts the controllers only handler mode runs: the
// enactments' and the policies'.
func setUpHandlerMode(ctx context.Context, mgr ctrl.Manager, metrics *pool.Metrics) error {
	enactments := enactment.New(mgr)
	metrics.Writes.Count(enactments.Pools)
	if err := enactments.SetupWithManager(mgr, enactment.SetupOptions{}); err != nil {
		return fmt.Errorf("set up the enactment controller: %w", err)
	}
	if err := policy.New(mgr).SetupWithManager(ctx, mgr, policy.SetupOptions{}); err != nil {
		return fmt.Errorf("set up the policy controller: %w", err)
	}
	return nil
}

// setUpClaims starts the Cluster API IPAM provider when the
// IPAddressClaim and IPAddress CRDs are installed, and returns the version
// it speaks and the signer of its IPAddresses; without them it says so
// once and returns "". CRDs installed later are served after a restart.
func setUpClaims(ctx context.Context, mgr ctrl.Manager, o options, metrics *pool.Metrics, carried *carriers.Carriers) (string, *capi.Signer, error) {
	version, served, err := capi.Served(mgr.GetRESTMapper())
	if err != nil {
		return "", nil, err
	}
	if !served {
		ctrl.Log.Info("not serving Cluster API IPAddressClaims: the ipam.cluster.x-k8s.io CRDs are not installed (restart the pool controller after installing them)")
		return "", nil, nil
	}
	cluster, err := capi.ClusterServed(mgr.GetRESTMapper())
	if err != nil {
		return "", nil, err
	}
	signer, err := loadSigner(ctx, mgr, o)
	if err != nil {
		return "", nil, err
	}
	claims := claim.New(mgr, version, cluster)
	claims.Signer, claims.Waiting, claims.Carried = signer, metrics.Waiting, carried
	metrics.Writes.Count(claims.Pools)
	if err := claims.SetupWithManager(mgr, claim.SetupOptions{}); err != nil {
		return "", nil, fmt.Errorf("set up the IPAddressClaim controller: %w", err)
	}
	ctrl.Log.Info("serving Cluster API IPAddressClaims of NodeIPPools", "version", capi.Group+"/"+version, "clusterVersion", cluster)
	return version, signer, nil
}

// loadSigner reads, or creates, the key the IPAddresses are signed with,
// in the Secret o names (capi.LoadOrCreateSigner).
func loadSigner(ctx context.Context, mgr ctrl.Manager, o options) (*capi.Signer, error) {
	namespace := cmp.Or(o.keyNamespace, o.leaseNamespace)
	if namespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			namespace = strings.TrimSpace(string(b))
		}
	}
	if namespace == "" {
		ctrl.Log.Info("no namespace for the signing key's Secret (not in a pod, and no --signing-key-namespace): " +
			"IPAddresses are signed with a key of this process's lifetime, and signed again by their claims after a restart")
		return capi.NewEphemeralSigner(), nil
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	return capi.LoadOrCreateSigner(ctx, c, namespace, o.keySecret)
}

// serviceAccountNamespace holds the namespace of the pod's service account.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// setUpPooledPolicies starts the controller of pooled policies (which
// companion mode relies on, and handler mode serves too) when their CRD is
// installed, and reports whether it is. Beside kubernetes-nmstate's
// handler (companion) it renews the NodeNetworkStates that handler left
// holding nothing (companion.Reconciler.RenewStates).
func setUpPooledPolicies(mgr ctrl.Manager, metrics *pool.Metrics, companionMode bool, carried *carriers.Carriers) (bool, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(ippoolv1.GroupVersion.WithKind(holder.PooledPolicyKind).GroupKind(), ippoolv1.GroupVersion.Version)
	switch {
	case meta.IsNoMatchError(err):
		ctrl.Log.Info("not serving pooled policies: the PooledNodeNetworkConfigurationPolicy CRD is not installed (restart the pool controller after installing it)")
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up %s: %w", holder.PooledPolicyKind, err)
	}
	policies := companion.New(mgr)
	policies.Waiting, policies.Carried = metrics.Waiting, carried
	policies.RenewStates = companionMode
	metrics.Writes.Count(policies.Pools)
	if err := policies.SetupWithManager(mgr, companion.SetupOptions{}); err != nil {
		return false, fmt.Errorf("set up the pooled policy controller: %w", err)
	}
	return true, nil
}

// newManager creates the manager, with a webhook server when o asks for
// one (nil otherwise).
func newManager(o options) (ctrl.Manager, webhook.Server, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load the kubeconfig: %w", err)
	}
	var webhooks webhook.Server
	if o.webhookPort != 0 {
		webhooks = webhook.NewServer(webhook.Options{Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: s,
		// Cluster API's IPAM objects are read unstructured, from the cache.
		Client:                  client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		WebhookServer:           webhooks,
		Metrics:                 o.metrics.Options(),
		HealthProbeBindAddress:  o.healthAddr,
		LeaderElection:          o.leaderElection,
		LeaderElectionID:        deploy.PoolControllerLease,
		LeaderElectionNamespace: o.leaseNamespace,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create the manager: %w", err)
	}
	return mgr, webhooks, nil
}
