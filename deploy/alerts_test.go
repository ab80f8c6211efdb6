package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestAlertRulesAreOne: the PrometheusRule carries exactly the groups of
// the plain rules file (neither is edited alone), and kustomize renders it.
func TestAlertRulesAreOne(t *testing.T) {
	read := func(name string) map[string]any {
		raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "deploy", "alerts", name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	file, rule := read("rules.yaml"), read("prometheusrule.yaml")
	spec, _ := rule["spec"].(map[string]any)
	if !equality.Semantic.DeepEqual(file["groups"], spec["groups"]) {
		t.Fatal("deploy/alerts/prometheusrule.yaml's spec.groups differ from rules.yaml's groups: change both")
	}
	var kinds []string
	for _, o := range render(t, "alerts") {
		kinds = append(kinds, o.GetKind())
	}
	if !slices.Equal(kinds, []string{"PrometheusRule", "ServiceMonitor"}) {
		t.Fatalf("kustomize build deploy/alerts: %v, want a PrometheusRule and a ServiceMonitor", kinds)
	}
}

// TestEveryAlertHasARunbook: every alert has a severity, a summary, a
// description and a runbook URL whose section exists in docs/alerts.md,
// and every series it reads is one the controllers export.
func TestEveryAlertHasARunbook(t *testing.T) {
	rules, err := deploy.AlertRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("no alerting rule")
	}
	doc, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (\S+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	exported := exportedSeries(t)
	for _, r := range rules {
		if !slices.Contains([]string{"warning", "critical"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s", r.Alert, a)
			}
		}
		url := r.Annotations["runbook_url"]
		if want := "docs/alerts.md#" + strings.ToLower(r.Alert); !strings.HasSuffix(url, want) {
			t.Errorf("%s: runbook_url %q, want one ending in %s", r.Alert, url, want)
		}
		if !anchors[strings.ToLower(r.Alert)] {
			t.Errorf("%s: docs/alerts.md has no section \"### %s\"", r.Alert, r.Alert)
		}
		for _, s := range r.Series() {
			if !exported[s] {
				t.Errorf("%s reads %s, which no controller exports", r.Alert, s)
			}
		}
		if len(r.Series()) == 0 {
			t.Errorf("%s reads no series of the pool controller", r.Alert)
		}
	}
}

// exportedSeries returns the names of the series the pool controller's
// and the handler's metrics describe.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	collectors := append(pool.NewMetrics().Collectors(), handler.NewMetrics().Collectors()...)
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		for _, c := range collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	// controller-runtime's, whenever leader election runs (the default);
	// the e2e suite reads it from a running pool controller.
	out := map[string]bool{"leader_election_master_status": true}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}
