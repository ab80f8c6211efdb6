package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
)

// TestStatusMetrics: policies and enactments are counted by status under
// kubernetes-nmstate's names, read from the API server, every status
// present from the start.
func TestStatusMetrics(t *testing.T) {
	RegisterTestingT(t)
	startController(t, time.Minute)
	names := setUp(t, "metrics", 3, intstr.FromInt32(3))
	handlerWrites(names[0], shared.NodeNetworkConfigurationEnactmentConditionAvailable, false)
	handlerWrites(names[1], shared.NodeNetworkConfigurationEnactmentConditionFailing, false)
	// A policy that selects no node.
	lonely := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "metrics-lonely"}}
	lonely.Spec.NodeSelector = map[string]string{"role": "nobody"}
	lonely.Spec.DesiredState = shared.NewState("interfaces: []\n")
	Expect(k.Create(ctx, lonely)).To(Succeed())
	t.Cleanup(func() { _ = k.Delete(ctx, lonely) })
	Eventually(policyState("metrics"), 30*time.Second).Should(HavePrefix("Degraded"))
	Eventually(policyState("metrics-lonely"), 30*time.Second).Should(HavePrefix("Ignored"))

	m := policy.NewStatusMetrics(k)
	Expect(testutil.CollectAndCompare(m, strings.NewReader(`
# HELP kubernetes_nmstate_enactments_status NodeNetworkConfigurationEnactments by status: the type of their True condition.
# TYPE kubernetes_nmstate_enactments_status gauge
kubernetes_nmstate_enactments_status{status="Aborted"} 0
kubernetes_nmstate_enactments_status{status="Available"} 1
kubernetes_nmstate_enactments_status{status="Failing"} 1
kubernetes_nmstate_enactments_status{status="Pending"} 0
kubernetes_nmstate_enactments_status{status="Progressing"} 0
kubernetes_nmstate_enactments_status{status="Unknown"} 1
# HELP kubernetes_nmstate_policies_status NodeNetworkConfigurationPolicies by status: the type of their True condition.
# TYPE kubernetes_nmstate_policies_status gauge
kubernetes_nmstate_policies_status{status="Available"} 0
kubernetes_nmstate_policies_status{status="Degraded"} 1
kubernetes_nmstate_policies_status{status="Ignored"} 1
kubernetes_nmstate_policies_status{status="Progressing"} 0
kubernetes_nmstate_policies_status{status="Unknown"} 0
`))).To(Succeed())
}
