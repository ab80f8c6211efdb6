package pool_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/enactment"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/handler"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/policy"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// TestWhoWritesWhat keeps docs/protocol.md's table "Who writes what" true:
// over a rollout to two nodes of a policy that draws from a pool, a reset
// and the policy's deletion, every part of an enactment that the API server's
// managedFields show a writer owning is a part the table names, and that
// writer is one its row names. Each controller writes under its own field
// manager (FieldOwner), so the API server, not the code under test, says
// who wrote what.
func TestWhoWritesWhat(t *testing.T) {
	RegisterTestingT(t)
	rows := writersTable(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &nncev1beta1.NodeNetworkConfigurationEnactmentList{})
	Expect(err).NotTo(HaveOccurred())
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // part -> field managers
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(metav1.Object)
			if !ok || !strings.HasPrefix(o.GetName(), "writers") {
				continue // another test's enactment, which the test itself may write
			}
			mu.Lock()
			for _, mf := range o.GetManagedFields() {
				for _, part := range partsOf(t, mf) {
					if seen[part] == nil {
						seen[part] = map[string]bool{}
					}
					seen[part][mf.Manager] = true
				}
			}
			mu.Unlock()
		}
	}()

	twoNodesOf(t, "writers", ippoolv1.IPRange{CIDR: "10.14.0.0/24", Start: "10.14.0.1", End: "10.14.0.10"})
	e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "writers02.writers"}}
	before := held(e.Name, "writers")
	annotate(e, "writers")
	Eventually(func() []string { return held(e.Name, "writers") }).ShouldNot(Or(BeEmpty(), Equal(before)))
	Eventually(enactmentState(e.Name)).Should(HavePrefix("Available"))
	deleteObject(&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "writers"}})
	for _, name := range []string{"writers01.writers", "writers02.writers"} {
		Eventually(func() bool {
			return apierrors.IsNotFound(k.Get(ctx, client.ObjectKey{Name: name}, &nncev1beta1.NodeNetworkConfigurationEnactment{}))
		}).Should(BeTrue(), "retired with its policy")
	}
	w.Stop()
	<-done

	mu.Lock()
	defer mu.Unlock()
	Expect(seen).To(HaveKey("status.ippool"), "the watch saw the records written")
	for _, part := range slices.Sorted(maps.Keys(seen)) {
		allowed, named := rows[part]
		for _, m := range slices.Sorted(maps.Keys(seen[part])) {
			switch {
			case !named:
				t.Errorf("%s writes %s of an enactment, a part the table of docs/protocol.md does not name", m, part)
			case !allowed[writerOf(m)]:
				t.Errorf("%s (%s) writes %s of an enactment; the table of docs/protocol.md does not name it as its writer", m, writerOf(m), part)
			}
		}
	}
}

// writerOf names the writer whose field manager is m, as the table does:
// the pool controller's process runs the pool and enactment controllers
// (and the policy controller, which the table names apart); anyone else
// is an admin.
func writerOf(m string) string {
	switch m {
	case handler.FieldOwner:
		return "handler"
	case pool.FieldOwner, enactment.FieldOwner:
		return "pool controller"
	case policy.FieldOwner:
		return "policy controller"
	}
	return "admin"
}

// writersTable reads the table "Who writes what" of docs/protocol.md: by
// part of an enactment (the table's first column, as partsOf names
// them), the writers its other columns name.
func writersTable(t *testing.T) map[string]map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "docs", "protocol.md"))
	Expect(err).NotTo(HaveOccurred())
	_, section, _ := strings.Cut(string(raw), "\n## Who writes what\n")
	section, _, _ = strings.Cut(section, "\n## ")
	ticked := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 || strings.HasPrefix(cells[0], "part") || strings.HasPrefix(cells[0], "---") {
			continue
		}
		writers := map[string]bool{}
		text := strings.ToLower(cells[1] + " " + cells[2])
		for _, w := range []string{"handler", "pool controller", "policy controller", "admin"} {
			writers[w] = strings.Contains(text, w)
		}
		if strings.Contains(text, "whoever") {
			writers["handler"], writers["pool controller"] = true, true
		}
		for _, m := range ticked.FindAllStringSubmatch(cells[0], -1) {
			part := strings.TrimSuffix(m[1], "[*].releasing")
			switch {
			case strings.HasPrefix(cells[0], "annotation"):
				part = "annotation " + part
			case strings.HasPrefix(cells[0], "finalizer"):
				part = "finalizer " + part
			}
			if out[part] == nil {
				out[part] = map[string]bool{}
			}
			for w, ok := range writers {
				out[part][w] = out[part][w] || ok
			}
		}
	}
	Expect(out).To(HaveKey("status.slot.granted"), "the table was read")
	return out
}

// partsOf returns the parts of an enactment that a managedFields entry
// owns, named as the table names them: status fields that hold a value (a
// slot's two halves apart), annotations and finalizers.
func partsOf(t *testing.T, mf metav1.ManagedFieldsEntry) []string {
	if mf.FieldsV1 == nil {
		return nil
	}
	var fields map[string]map[string]json.RawMessage
	if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
		t.Errorf("managedFields of %s: %v", mf.Manager, err)
		return nil
	}
	var out []string
	for key, sub := range fields["f:status"] {
		name := strings.TrimPrefix(key, "f:")
		if name == "." || string(sub) == "{}" {
			// An empty object sets nothing: an empty struct that Go
			// serializes (a first status write carries
			// desiredStateMetaInfo: {}), or one emptied, which, as any
			// removal, the table does not see.
			continue
		}
		if name != "slot" {
			out = append(out, "status."+name)
			continue
		}
		var slot map[string]json.RawMessage
		_ = json.Unmarshal(sub, &slot)
		for half := range slot {
			if half != "." {
				out = append(out, "status.slot."+strings.TrimPrefix(half, "f:"))
			}
		}
	}
	metadata := fields["f:metadata"]
	var annotations, finalizers map[string]json.RawMessage
	_ = json.Unmarshal(metadata["f:annotations"], &annotations)
	_ = json.Unmarshal(metadata["f:finalizers"], &finalizers)
	for key := range annotations {
		if name := strings.TrimPrefix(key, "f:"); strings.HasPrefix(name, "nmstate.io/") {
			out = append(out, "annotation "+name)
		}
	}
	for key := range finalizers {
		if name := strings.Trim(strings.TrimPrefix(key, "v:"), `"`); name == ippoolv1.FinalizerIPPool {
			out = append(out, "finalizer "+name)
		}
	}
	return out
}
