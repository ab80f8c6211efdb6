package kinds_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// grace is the garbage collection grace period, and the quarantine period,
// of the pool controllers these tests start.
const grace = 3 * time.Second

// version is the version of Cluster API's IPAM group the claims are
// written in.
const version = "v1beta2"

var (
	env    *envtest.Env
	k      client.Client
	simBin string
	ctx    = context.Background()
)

// TestMain runs the package on a control plane with the NodeIPPool webhook
// served and Cluster API's CRDs installed: every kind of holder can draw
// from a pool.
func TestMain(m *testing.M) {
	os.Exit(envtest.RunWith(m, []envtest.Option{envtest.WithWebhook(), envtest.WithClusterAPI()}, func(s *envtest.Suite) {
		env, k, simBin = s.Env, s.Client, s.Command("nmstatectl-sim")
		if _, err := env.StartWebhook(); err != nil {
			panic(err) // the suite cannot run without it
		}
	}, "nmstatectl-sim"))
}

func init() {
	SetDefaultEventuallyTimeout(45 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
}
