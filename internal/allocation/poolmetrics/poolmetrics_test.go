package poolmetrics

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// TestWaitingAcrossGroups: each group's holders replace the group's
// earlier ones only, a pool counts every group's, and a holder waiting on
// two pools counts on both.
func TestWaitingAcrossGroups(t *testing.T) {
	w := NewWaiting()
	w.Replace("NodeIPPool/a", []Wait{{"n1.p", "a"}, {"n2.p", "a"}})
	w.Replace("IPAddressClaim/ns/c", []Wait{{"IPAddressClaim/ns/c", "a"}})
	w.Replace("PooledNodeNetworkConfigurationPolicy/x", []Wait{
		{"PooledNodeNetworkConfigurationPolicy/x/n3", "b"}, {"PooledNodeNetworkConfigurationPolicy/x/n3", "a"}})
	if got := w.On("a"); !slices.Equal(got, []string{"IPAddressClaim/ns/c", "PooledNodeNetworkConfigurationPolicy/x/n3", "n1.p", "n2.p"}) {
		t.Fatalf("On(a) = %v", got)
	}
	w.Replace("NodeIPPool/a", []Wait{{"n2.p", "a"}})
	w.Replace("IPAddressClaim/ns/c", nil)
	if got := w.On("a"); !slices.Equal(got, []string{"PooledNodeNetworkConfigurationPolicy/x/n3", "n2.p"}) {
		t.Fatalf("On(a) after the replacements = %v", got)
	}
	if w.Count("b") != 1 || w.Count("c") != 0 {
		t.Fatalf("Count(b) = %d, Count(c) = %d; want 1 and 0", w.Count("b"), w.Count("c"))
	}
	var none *Waiting
	none.Replace("g", []Wait{{"h", "a"}})
	if none.On("a") != nil || none.Count("a") != 0 {
		t.Fatal("a nil Waiting tracks something")
	}
}

// TestWritesCountsEveryWriteAndConflict: a writer counted by Writes
// reports each status write it attempts and each conflict, after the
// hooks it had already.
func TestWritesCountsEveryWriteAndConflict(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	pool := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/29"}}}
	conflicts := 2
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool).WithStatusSubresource(pool).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string,
			obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(schema.GroupResource{Resource: "nodeippools"}, obj.GetName(), nil)
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}}).Build()
	w := poolwrite.NewWriter(c, c, clock.RealClock{})
	var earlier int
	w.OnConflict = func(string) { earlier++ }
	m := NewWrites()
	m.Count(w)
	m.Know("other")
	_, err = w.UpdateConditions(context.Background(), "p", func(p *ippoolv1.NodeIPPool) bool {
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: "T", Status: metav1.ConditionTrue, Reason: "R",
			LastTransitionTime: metav1.Now()})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	if got := testutil.ToFloat64(m.writes.WithLabelValues("p")); got != 3 {
		t.Errorf("writes of p = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.conflicts.WithLabelValues("p")); got != 2 {
		t.Errorf("conflicts of p = %v, want 2", got)
	}
	if earlier != 2 {
		t.Errorf("the writer's own OnConflict saw %d conflicts, want 2", earlier)
	}
	if n, err := testutil.GatherAndCount(reg, "nmstate_ippool_status_writes_total"); err != nil || n != 2 {
		t.Errorf("series of nmstate_ippool_status_writes_total = %d (%v), want 2: p, and other at zero", n, err)
	}
	m.Forget("other")
	if n, _ := testutil.GatherAndCount(reg, "nmstate_ippool_status_writes_total"); n != 1 {
		t.Errorf("series after Forget = %d, want 1", n)
	}
}
