package policy

import (
	"context"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/policystatus"
)

// StatusMetrics counts policies and enactments by status, under
// kubernetes-nmstate's metric names, so that its dashboards and alerts
// keep working: kubernetes_nmstate_policies_status and
// kubernetes_nmstate_enactments_status, one series per status (the True
// condition type; "Unknown" when none is True), with no per-object
// labels. It reads through its reader when scraped; give it the manager's
// cache, which holds both kinds.
type StatusMetrics struct {
	reader     client.Reader
	policies   *prometheus.Desc
	enactments *prometheus.Desc
}

// NewStatusMetrics returns unregistered status metrics reading through
// reader.
func NewStatusMetrics(reader client.Reader) *StatusMetrics {
	return &StatusMetrics{
		reader: reader,
		policies: prometheus.NewDesc("kubernetes_nmstate_policies_status",
			"NodeNetworkConfigurationPolicies by status: the type of their True condition.", []string{"status"}, nil),
		enactments: prometheus.NewDesc("kubernetes_nmstate_enactments_status",
			"NodeNetworkConfigurationEnactments by status: the type of their True condition.", []string{"status"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (m *StatusMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.policies
	ch <- m.enactments
}

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 10 * time.Second

// Collect implements prometheus.Collector. A failed read reports nothing
// for its kind, and is logged.
func (m *StatusMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	log := ctrl.Log.WithName("status-metrics")
	var policies nmstatev1.NodeNetworkConfigurationPolicyList
	if err := m.reader.List(ctx, &policies); err != nil {
		log.Error(err, "could not list the policies for the metrics")
	} else {
		counts := zeroes(policystatus.Ignored, shared.NodeNetworkConfigurationPolicyConditionAvailable,
			shared.NodeNetworkConfigurationPolicyConditionDegraded, shared.NodeNetworkConfigurationPolicyConditionProgressing)
		for i := range policies.Items {
			counts[conditions.TrueTypeOr(policies.Items[i].Status.Conditions, unknown)]++
		}
		emit(ch, m.policies, counts)
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := m.reader.List(ctx, &enactments); err != nil {
		log.Error(err, "could not list the enactments for the metrics")
	} else {
		counts := zeroes(shared.NodeNetworkConfigurationEnactmentConditionTypes[:]...)
		for i := range enactments.Items {
			counts[conditions.TrueTypeOr(enactments.Items[i].Status.Conditions, unknown)]++
		}
		emit(ch, m.enactments, counts)
	}
}

// unknown is the status of an object with no True condition.
const unknown = "Unknown"

// zeroes returns a count of 0 for each of types and for unknown, so that
// every series exists from the first scrape.
func zeroes(types ...shared.ConditionType) map[string]int {
	out := map[string]int{unknown: 0}
	for _, t := range types {
		out[string(t)] = 0
	}
	return out
}

func emit(ch chan<- prometheus.Metric, desc *prometheus.Desc, counts map[string]int) {
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), status)
	}
}
