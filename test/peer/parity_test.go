package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// side is one of the two clusters of the parity spec: the same nodes,
// run by one handler.
type side struct {
	handler string
	dir     string
	k       client.Client
	cfg     *rest.Config
	// fresh puts the nodes' networks back as they were once the side
	// started (envtest.SaveNetworks).
	fresh func() error
}

// startSide starts a local cluster of two nodes run by handler.
func startSide(handler string) *side {
	GinkgoHelper()
	root, err := os.MkdirTemp("", "nmstate-ippool-parity-")
	Expect(err).NotTo(HaveOccurred())
	s := &side{handler: handler, dir: filepath.Join(root, "cluster")}
	// One retry: a failing node gives up within seconds on both sides.
	localclusterIn(s.dir, "up", "--nodes", "2", "--handler", handler, "--peer-handler", peerHandler, "--retries", "1",
		"--bin", bin, "--assets", envtest.AssetsDir())
	DeferCleanup(func() {
		localclusterIn(s.dir, "down")
		_ = os.RemoveAll(root)
	})
	s.cfg, err = envtest.LocalClusterConfig(s.dir)
	Expect(err).NotTo(HaveOccurred())
	s.k, err = envtest.ClientFor(s.cfg)
	Expect(err).NotTo(HaveOccurred())
	for _, node := range []string{"node01", "node02"} {
		Eventually(func() error { return s.k.Get(ctx, client.ObjectKey{Name: node}, &nncev1beta1.NodeNetworkState{}) }).
			Should(Succeed(), "the NodeNetworkState of %s on %s", node, handler)
	}
	s.fresh, err = envtest.SaveNetworks(filepath.Join(s.dir, "nodes"))
	Expect(err).NotTo(HaveOccurred())
	return s
}

// examplePolicies returns the policies of the e2e suite's examples.
func examplePolicies() []*unstructured.Unstructured {
	GinkgoHelper()
	out, err := envtest.ExamplePolicies(envtest.ExamplesDir())
	Expect(err).NotTo(HaveOccurred())
	return out
}

var digits = regexp.MustCompile(`[0-9]+`)

// shape is a message with its numbers replaced: what the admin reads,
// without the counts and times that differ between runs.
func shape(message string) string {
	if i := strings.IndexByte(message, '\n'); i >= 0 {
		message = message[:i]
	}
	return digits.ReplaceAllString(message, "N")
}

// settled returns the type of a policy's True condition.
func (s *side) settled(name string) (string, error) {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if err := s.k.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return "", err
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return string(c.Type), nil
		}
	}
	return "no condition", nil
}

// selected returns the nodes a policy selects, sorted.
func (s *side) selected(u *unstructured.Unstructured) []string {
	GinkgoHelper()
	selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "nodeSelector")
	var nodes corev1.NodeList
	Expect(s.k.List(ctx, &nodes, client.MatchingLabels(selector))).To(Succeed())
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// enactmentState returns "Type Reason" of node.policy's True condition.
func (s *side) enactmentState(node, policy string) (string, error) {
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := s.k.Get(ctx, shared.EnactmentKey(node, policy), &e); err != nil {
		return "", err
	}
	return trueCondition(&e), nil
}

// view is what an admin sees of a policy on one side, line by line.
func (s *side) view(name string) []string {
	GinkgoHelper()
	var out []string
	var p nmstatev1.NodeNetworkConfigurationPolicy
	Expect(s.k.Get(ctx, client.ObjectKey{Name: name}, &p)).To(Succeed())
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("policy condition %s=%s %s: %s", c.Type, c.Status, c.Reason, shape(c.Message)))
	}
	var list nncev1beta1.NodeNetworkConfigurationEnactmentList
	Expect(s.k.List(ctx, &list, client.MatchingLabels{shared.EnactmentPolicyLabel: name})).To(Succeed())
	for _, e := range list.Items {
		node := e.Labels[shared.EnactmentNodeLabel]
		for _, c := range e.Status.Conditions {
			msg := shape(c.Message)
			if c.Type == shared.NodeNetworkConfigurationEnactmentConditionFailing && c.Status == corev1.ConditionTrue {
				msg = "(the failure)" // each handler words nmstatectl's error its own way
			}
			out = append(out, fmt.Sprintf("enactment %s condition %s=%s %s: %s", node, c.Type, c.Status, c.Reason, msg))
		}
	}
	out = append(out, s.table("nodenetworkconfigurationpolicies", name)...)
	for _, e := range list.Items {
		out = append(out, s.table("nodenetworkconfigurationenactments", e.Name)...)
	}
	out = append(out, s.stateFields("node01")...)
	var events corev1.EventList
	Expect(s.k.List(ctx, &events)).To(Succeed())
	for _, ev := range events.Items {
		obj := ev.InvolvedObject
		if (obj.Kind == "NodeNetworkConfigurationPolicy" && obj.Name == name) ||
			(obj.Kind == "NodeNetworkConfigurationEnactment" && strings.HasSuffix(obj.Name, "."+name)) {
			out = append(out, fmt.Sprintf("event %s %s %s", obj.Kind, ev.Type, ev.Reason))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// stateFields returns the fields of a node's NodeNetworkState an admin
// reads: which status fields are set, its conditions, and the sections of
// its current state.
func (s *side) stateFields(node string) []string {
	GinkgoHelper()
	var nns unstructured.Unstructured
	nns.SetAPIVersion("nmstate.io/v1beta1")
	nns.SetKind("NodeNetworkState")
	Expect(s.k.Get(ctx, client.ObjectKey{Name: node}, &nns)).To(Succeed())
	status, _, _ := unstructured.NestedMap(nns.Object, "status")
	var out []string
	for field, v := range status {
		out = append(out, "state field status."+field)
		switch field {
		case "currentState":
			for section := range v.(map[string]any) {
				out = append(out, "state field status.currentState."+section)
			}
		case "conditions":
			for _, c := range v.([]any) {
				c := c.(map[string]any)
				out = append(out, fmt.Sprintf("state condition %v=%v %v: %v", c["type"], c["status"], c["reason"], shape(fmt.Sprint(c["message"]))))
			}
		}
	}
	return out
}

// table returns the columns kubectl get prints of an object, as the API
// server renders them (the CRD's printer columns), ages left out.
func (s *side) table(resource, name string) []string {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(s.cfg)
	Expect(err).NotTo(HaveOccurred())
	url := fmt.Sprintf("%s/apis/nmstate.io/v1beta1/%s/%s", s.cfg.Host, resource, name)
	if resource == "nodenetworkconfigurationpolicies" {
		url = fmt.Sprintf("%s/apis/nmstate.io/v1/%s/%s", s.cfg.Host, resource, name)
	}
	req, err := newTableRequest(context.Background(), url)
	Expect(err).NotTo(HaveOccurred())
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	var t metav1.Table
	Expect(json.NewDecoder(resp.Body).Decode(&t)).To(Succeed())
	var out []string
	for _, row := range t.Rows {
		for i, col := range t.ColumnDefinitions {
			if col.Type == "date" || col.Name == "Age" || i >= len(row.Cells) {
				continue
			}
			out = append(out, fmt.Sprintf("kubectl get %s column %s: %v", resource, col.Name, row.Cells[i]))
		}
	}
	return out
}

// newTableRequest asks for an object as the Table kubectl get prints.
func newTableRequest(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	return req, nil
}

// knownDifference is a difference an admin sees between the two
// handlers, with its reason in the parity table of docs/modes.md: a line of the
// view that only one side shows, matched by a pattern.
type knownDifference struct {
	only    string // "upstream" or "ours"
	pattern *regexp.Regexp
	why     string
}

var knownDifferences = []knownDifference{
	{"ours", regexp.MustCompile(`^event NodeNetworkConfigurationEnactment Warning (Retrying|FailedToConfigure)$`),
		"a Warning Event on the enactment for every failed attempt, with nmstatectl's error and when the next comes, " +
			"beside kubernetes-nmstate's ReconcileFailed on the policy"},
	{"ours", regexp.MustCompile(`^state (condition .*|field status\.conditions)$`),
		"NodeNetworkState conditions: kubernetes-nmstate defines Available and Failing but does not write them; " +
			"ours says Failing when the node's state cannot be read"},
}

// unexplained returns the lines one side shows and the other does not,
// but those knownDifferences explain.
func unexplained(upstream, ours []string) []string {
	var out []string
	for _, d := range []struct {
		only       string
		have, lack []string
	}{{"upstream", upstream, ours}, {"ours", ours, upstream}} {
		for _, line := range d.have {
			if slices.Contains(d.lack, line) {
				continue
			}
			if !slices.ContainsFunc(knownDifferences, func(k knownDifference) bool {
				return k.only == d.only && k.pattern.MatchString(line)
			}) {
				out = append(out, "only "+d.only+": "+line)
			}
		}
	}
	return out
}

var _ = Describe("What an admin sees, from kubernetes-nmstate's handler and from ours", Ordered, func() {
	var sides []*side

	BeforeAll(func() {
		sides = []*side{startSide("upstream"), startSide("ours")}
	})

	// rollOut creates a policy on both sides, waits until it settled, and
	// compares the two views; then deletes it. With fail, the last node
	// the policy selects fails every apply.
	rollOut := func(u *unstructured.Unstructured, fail bool) {
		GinkgoHelper()
		views := map[string][]string{}
		for _, s := range sides {
			failOn := ""
			if fail {
				nodes := s.selected(u)
				Expect(nodes).NotTo(BeEmpty(), "%s selects no node", u.GetName())
				failOn = nodes[len(nodes)-1]
			}
			if failOn != "" {
				fail := filepath.Join(s.dir, "nodes", failOn+".yaml.fail")
				Expect(os.WriteFile(fail, []byte("apply: simulated failure of the node's network\n"), 0o600)).To(Succeed())
				DeferCleanup(func() { _ = os.Remove(fail) })
			}
			Expect(s.k.Create(ctx, u.DeepCopy())).To(Succeed(), "%s on %s", u.GetName(), s.handler)
			want := "Available"
			if failOn != "" {
				want = "Degraded"
				// Until its retries are spent, the failing node is
				// Retrying.
				Eventually(func() (string, error) { return s.enactmentState(failOn, u.GetName()) }).
					Should(Equal("Failing FailedToConfigure"), "%s on %s", u.GetName(), s.handler)
			}
			Eventually(func() (string, error) { return s.settled(u.GetName()) }).
				Should(Equal(want), "%s on %s", u.GetName(), s.handler)
			// Events are written after the conditions: take the view once
			// two in a row, half a second apart, are the same.
			var last []string
			Eventually(func() bool {
				now := s.view(u.GetName())
				same := slices.Equal(now, last)
				last = now
				return same
			}).WithPolling(500 * time.Millisecond).Should(BeTrue())
			views[s.handler] = last
			GinkgoWriter.Printf("%s, %s's handler:\n  %s\n", u.GetName(), s.handler, strings.Join(views[s.handler], "\n  "))
			if failOn != "" {
				Expect(os.Remove(filepath.Join(s.dir, "nodes", failOn+".yaml.fail"))).To(Succeed())
			}
		}
		Expect(unexplained(views["upstream"], views["ours"])).To(BeEmpty(),
			"%s: what only one handler shows (upstream:\n%s\nours:\n%s)", u.GetName(),
			strings.Join(views["upstream"], "\n"), strings.Join(views["ours"], "\n"))
		for _, s := range sides {
			Expect(s.k.Delete(ctx, u.DeepCopy())).To(Succeed())
			Eventually(func() ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
				var list nncev1beta1.NodeNetworkConfigurationEnactmentList
				err := s.k.List(ctx, &list, client.MatchingLabels{shared.EnactmentPolicyLabel: u.GetName()})
				return list.Items, err
			}).Should(BeEmpty())
			// The next policy starts from the nodes as they were: one
			// leaves a bond whose ports another gives addresses to, which
			// nmstate refuses.
			Expect(s.fresh()).To(Succeed())
		}
	}

	It("is the same for every documented kind of policy", func() {
		for _, u := range examplePolicies() {
			By(u.GetName())
			rollOut(u, false)
		}
	})

	It("is the same when a node fails to apply", func() {
		for _, u := range examplePolicies() {
			u = u.DeepCopy()
			u.SetName(u.GetName() + "-failing")
			// Both nodes at once, so that which node goes first, which
			// each handler decides its own way, does not matter.
			Expect(unstructured.SetNestedField(u.Object, "100%", "spec", "maxUnavailable")).To(Succeed())
			By(u.GetName())
			rollOut(u, true)
		}
	})
})
