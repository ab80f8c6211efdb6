package envtest

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/claim"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/companion"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/enactment"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/carriers"
)

// PoolController is a pool controller (the pool, enactment and policy
// reconcilers, as the pool-controller binary runs them) in a manager of its
// own.
type PoolController struct {
	Pools      *pool.Reconciler
	Enactments *enactment.Reconciler
	Policies   *policy.Reconciler
	// Claims serves Cluster API IPAddressClaims, when the control plane
	// has their CRDs (WithClusterAPI); nil otherwise.
	Claims *claim.Reconciler
	// PooledPolicies keeps the NNCPs of pooled policies (companion mode).
	PooledPolicies *companion.Reconciler
	stop           func() error
	cache          *cacheUse
}

// CachedWhole reports whether the controller's cache was asked for
// objects of o's type, read or watched whole (o a typed object or list;
// metav1.PartialObjectMetadata is metadata only).
func (pc *PoolController) CachedWhole(o any) bool {
	return pc.cache.asked(o)
}

// CompanionMode sets pc up as cmd/pool-controller --mode companion does:
// beside kubernetes-nmstate's handler, which writes the NNCPs' status and
// its enactments, it runs neither the policy nor the enactment
// controller, serves no enactment, and renews the states that handler
// leaves holding nothing. A tune function of StartPoolController.
func CompanionMode(pc *PoolController) {
	pc.Enactments, pc.Policies = nil, nil
	pc.Pools.ServeEnactments = false
	pc.PooledPolicies.RenewStates = true
}

// count has metrics count the pool writes of every reconciler, and the
// holders of every kind that wait, as cmd/pool-controller does.
func (pc *PoolController) count(metrics *pool.Metrics) {
	if metrics == nil {
		return
	}
	metrics.Writes.Count(pc.Pools.Pools)
	if pc.Claims != nil {
		pc.Claims.Waiting = metrics.Waiting
		metrics.Writes.Count(pc.Claims.Pools)
	}
	if pc.PooledPolicies != nil {
		pc.PooledPolicies.Waiting = metrics.Waiting
		metrics.Writes.Count(pc.PooledPolicies.Pools)
	}
	if pc.Enactments != nil {
		metrics.Writes.Count(pc.Enactments.Pools)
	}
}

// serveClaims gives pc a claim controller when the IPAM CRDs are
// installed, signing with the install's key, as cmd/pool-controller does.
func (e *Env) serveClaims(mgr ctrl.Manager, pc *PoolController) error {
	version, served, err := capi.Served(mgr.GetRESTMapper())
	if err != nil || !served {
		return err
	}
	clusters, err := capi.ClusterServed(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	pc.Claims, pc.Pools.IPAMVersion = claim.New(mgr, version, clusters), version
	// The key of the install: a Secret every pool controller of the
	// control plane reads, made by the first.
	c, err := client.New(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return err
	}
	signer, err := capi.LoadOrCreateSigner(context.Background(), c, "default", capi.DefaultKeySecret)
	if err != nil {
		return err
	}
	pc.Claims.Signer, pc.Pools.Signer = signer, signer
	return nil
}

// StartPoolController runs a pool controller with the given garbage
// collection grace period until Stop; tune, if given, adjusts its
// reconcilers before they start.
func (e *Env) StartPoolController(grace time.Duration, metrics *pool.Metrics, tune ...func(*PoolController)) (*PoolController, error) {
	var use *cacheUse
	mgr, err := e.newManagerRecording(nil, &use)
	if err != nil {
		return nil, err
	}
	pc := &PoolController{Pools: pool.New(mgr, metrics), Enactments: enactment.New(mgr), Policies: policy.New(mgr),
		PooledPolicies: companion.New(mgr), cache: use}
	pc.Pools.PooledPolicies = true
	pc.Policies.Batch, pc.Pools.Batch = 50*time.Millisecond, 50*time.Millisecond
	pc.Pools.GracePeriod, pc.Pools.QuarantinePeriod = grace, grace
	if err := e.serveClaims(mgr, pc); err != nil {
		return nil, err
	}
	for _, f := range tune {
		f(pc)
	}
	if err := pc.watchCarriers(mgr); err != nil {
		return nil, err
	}
	pc.count(metrics)
	if err := pc.Pools.SetupWithManager(context.Background(), mgr, pool.SetupOptions{SkipNameValidation: true}); err != nil {
		return nil, err
	}
	if pc.Claims != nil {
		if err := pc.Claims.SetupWithManager(mgr, claim.SetupOptions{SkipNameValidation: true}); err != nil {
			return nil, err
		}
	}
	if pc.PooledPolicies != nil {
		if err := pc.PooledPolicies.SetupWithManager(mgr, companion.SetupOptions{SkipNameValidation: true}); err != nil {
			return nil, err
		}
	}
	if pc.Enactments != nil {
		if err := pc.Enactments.SetupWithManager(mgr, enactment.SetupOptions{SkipNameValidation: true}); err != nil {
			return nil, err
		}
	}
	if pc.Policies != nil {
		if err := pc.Policies.SetupWithManager(context.Background(), mgr, policy.SetupOptions{SkipNameValidation: true}); err != nil {
			return nil, err
		}
	}
	pc.stop = RunManager(mgr)
	return pc, nil
}

// watchCarriers gives the controllers that hand addresses out one watch
// of what the nodes carry, as cmd/pool-controller does, unless tune gave
// the pool controller its own; its reads before the watch syncs go
// through the pool controller's APIReader (which tune may have wrapped).
func (pc *PoolController) watchCarriers(mgr ctrl.Manager) error {
	var err error
	if pc.Pools.Carried, err = carriers.Ensure(pc.Pools.Carried, mgr, pc.Pools.APIReader); err != nil {
		return err
	}
	if pc.Claims != nil && pc.Claims.Carried == nil {
		pc.Claims.Carried = pc.Pools.Carried
	}
	if pc.PooledPolicies != nil && pc.PooledPolicies.Carried == nil {
		pc.PooledPolicies.Carried = pc.Pools.Carried
	}
	return nil
}

// StartPolicyAndEnactmentControllers runs the policy controller (policy status and
// maxUnavailable slots) and the enactment controller (which retires the
// enactments handlers delete) until the returned function is called: what
// handler tests that play the pool controller's part by hand still need.
func (e *Env) StartPolicyAndEnactmentControllers() (stop func() error, err error) {
	mgr, err := e.NewManager()
	if err != nil {
		return nil, err
	}
	r := policy.New(mgr)
	r.Batch = 50 * time.Millisecond
	if err := r.SetupWithManager(context.Background(), mgr, policy.SetupOptions{SkipNameValidation: true}); err != nil {
		return nil, err
	}
	if err := enactment.New(mgr).SetupWithManager(mgr, enactment.SetupOptions{SkipNameValidation: true}); err != nil {
		return nil, err
	}
	return RunManager(mgr), nil
}

// Stop stops the controller and returns how it ended.
func (pc *PoolController) Stop() error {
	if pc.stop == nil {
		return nil
	}
	err := pc.stop()
	pc.stop = nil
	return err
}
