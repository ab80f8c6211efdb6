package pool_test

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/controllers/pool"
)

// TestEnactmentsFromAPIAreTheAPIServers: a decision a stale cache could
// get wrong reads the enactments as the API server has them, however far
// the cache lags. One the cache has at the API server's version is taken
// from the cache; one it has at an older version, or lacks, is read from
// the API server; one it still has that the API server no longer has is
// left out. Further behind than StaleEnactmentsRead, every enactment is
// listed, with the same result.
func TestEnactmentsFromAPIAreTheAPIServers(t *testing.T) {
	RegisterTestingT(t)
	create := func(name string) *nncev1beta1.NodeNetworkConfigurationEnactment {
		e := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(k.Create(ctx, e)).To(Succeed())
		t.Cleanup(func() { deleteObject(e) })
		return e
	}
	fresh, older := create("fresh01.api"), create("older01.api")
	create("missing01.api")
	olderCached := older.DeepCopy()
	older.Labels = map[string]string{"changed": "on-the-server"}
	Expect(k.Update(ctx, older)).To(Succeed())

	// The cache: fresh01 at the API server's version (marked, to tell
	// where it came from), older01 before its change, gone01 no longer on
	// the API server, missing01 not yet.
	freshCached := fresh.DeepCopy()
	freshCached.Annotations = map[string]string{"from": "the-cache"}
	gone := &nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{Name: "gone01.api", ResourceVersion: "1"}}
	cache := fake.NewClientBuilder().WithScheme(k.Scheme()).WithObjects(freshCached, olderCached, gone).Build()
	r := &pool.Reconciler{Client: cache, APIReader: k}

	got, err := r.EnactmentsFromAPI(ctx)
	Expect(err).NotTo(HaveOccurred())
	var seen []string
	for _, e := range got {
		if !strings.HasSuffix(e.Name, ".api") {
			continue
		}
		seen = append(seen, fmt.Sprintf("%s labels=%v annotations=%v", e.Name, e.Labels, e.Annotations))
	}
	Expect(seen).To(Equal([]string{
		"fresh01.api labels=map[] annotations=map[from:the-cache]",
		"missing01.api labels=map[] annotations=map[]",
		"older01.api labels=map[changed:on-the-server] annotations=map[]",
	}))

	// Far behind: an empty cache, more enactments than are read one by
	// one.
	want := map[string]string{}
	for i := range pool.StaleEnactmentsRead + 1 {
		e := create(fmt.Sprintf("many%02d.apilist", i))
		want[e.Name] = e.ResourceVersion
	}
	r.Client = fake.NewClientBuilder().WithScheme(k.Scheme()).Build()
	got, err = r.EnactmentsFromAPI(ctx)
	Expect(err).NotTo(HaveOccurred())
	listed := map[string]string{}
	for i, e := range got {
		if i > 0 {
			Expect(got[i-1].Name < e.Name).To(BeTrue(), "enactments in the order of their names")
		}
		if strings.HasSuffix(e.Name, ".apilist") {
			listed[e.Name] = e.ResourceVersion
		}
	}
	Expect(listed).To(Equal(want))
}
