package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// permission is one verb on one resource (or non-resource URL) of one
// role.
type permission struct{ role, group, resource, verb string }

func (p permission) String() string {
	return p.role + ": " + p.verb + " " + p.group + "/" + p.resource
}

// documentedRoles names, by the role column of the table of permissions
// (docs/install.md), the role it documents.
var documentedRoles = map[string]string{
	"handler":           "ClusterRole/nmstate-ippool-handler",
	"allocation-writer": "ClusterRole/nmstate-ippool-allocation-writer",
	"pool-controller":   "ClusterRole/nmstate-ippool-pool-controller",
	"leader-election (namespace nmstate-ippool)": "Role/nmstate-ippool-leader-election",
	"metrics-reader": "ClusterRole/nmstate-ippool-metrics-reader",
}

// TestRBACAsDocumented compares every role of the install (deploy/default
// and deploy/self-allocate) with the table of permissions in
// docs/install.md: a verb a role gains that the table does not list, or one the table lists
// that no role holds, fails.
func TestRBACAsDocumented(t *testing.T) {
	documented := docsTable(t)
	granted := map[permission]bool{}
	seen := map[string]bool{}
	for _, dir := range []string{"default", "self-allocate"} {
		for _, o := range render(t, dir) {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			id := o.GetKind() + "/" + o.GetName()
			role := ""
			for name, documentedID := range documentedRoles {
				if documentedID == id {
					role = name
				}
			}
			if role == "" {
				t.Errorf("deploy/%s has %s, which the table of permissions in docs/install.md does not document", dir, id)
				continue
			}
			seen[role] = true
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			for p := range expand(role, r.Rules) {
				granted[p] = true
			}
		}
	}
	for role := range documentedRoles {
		if !seen[role] {
			t.Errorf("docs/install.md documents role %s, which the install does not have", role)
		}
	}
	for p := range granted {
		if !documented[p] {
			t.Errorf("%s is granted but not in the table of permissions in docs/install.md: list it and say why, or drop it", p)
		}
	}
	for p := range documented {
		if !granted[p] {
			t.Errorf("the table of permissions in docs/install.md lists %s, which no role grants", p)
		}
	}
}

// expand returns every permission of rules, held by role.
func expand(role string, rules []rbacv1.PolicyRule) map[permission]bool {
	out := map[permission]bool{}
	for _, r := range rules {
		for _, v := range r.Verbs {
			for _, url := range r.NonResourceURLs {
				out[permission{role, "non-resource URL", url, v}] = true
			}
			for _, g := range r.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range r.Resources {
					out[permission{role, g, res, v}] = true
				}
			}
		}
	}
	return out
}

// docsTable parses the table of permissions in docs/install.md.
func docsTable(t *testing.T) map[permission]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start, end := strings.Index(text, "<!-- rbac-table -->"), strings.Index(text, "<!-- /rbac-table -->")
	if start < 0 || end < start {
		t.Fatal("docs/install.md has no table of permissions between <!-- rbac-table --> and <!-- /rbac-table -->")
	}
	out := map[permission]bool{}
	for line := range strings.SplitSeq(text[start:end], "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 5 || cells[0] == "role" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		if _, ok := documentedRoles[cells[0]]; !ok {
			t.Errorf("the table of permissions in docs/install.md has an unknown role %q", cells[0])
		}
		if strings.TrimSpace(cells[4]) == "" {
			t.Errorf("the table of permissions in docs/install.md says not why %s holds %s", cells[0], cells[2])
		}
		for v := range strings.SplitSeq(cells[3], ",") {
			out[permission{cells[0], cells[1], strings.Trim(cells[2], "` "), strings.TrimSpace(v)}] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("the table of permissions in docs/install.md is empty")
	}
	return out
}
