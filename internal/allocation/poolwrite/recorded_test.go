package poolwrite_test

import (
	"fmt"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// TestRecordedEntriesGoWithTheNextWrite: an entry its holder recorded,
// as told to the writer, is pruned by the next write the writer makes of
// that pool anyway, never by a write of its own, and its bit stays set;
// an entry told with another token (a later incarnation of the holder
// took it), one of another pool incarnation and one taken back
// (NotRecorded) stay in flight for the pool controller's rules. The
// trail says the pruned one was recorded, and why.
func TestRecordedEntriesGoWithTheNextWrite(t *testing.T) {
	RegisterTestingT(t)
	pool := newPool("told", "10.87.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	trail := auditTrail(w, func(c audit.Change) string {
		return fmt.Sprintf("%s %s %s %s: %s", c.Event, c.Address, c.Holder, c.Reason, c.Evidence)
	})
	claim := func(i int) string { return holder.ForClaim("tenant", fmt.Sprint("m", i)).String() }
	take := func(ips ...int) {
		_, err := w.Update(ctx, "told", func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			for _, i := range ips {
				ip := fmt.Sprint("10.87.0.", i)
				if err := alloc.AllocateIP(netip.MustParseAddr(ip)); err != nil {
					return false, err
				}
				poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Holder: claim(i), Token: fmt.Sprint("uid-", i), Since: metav1.Now()})
			}
			return true, nil
		})
		Expect(err).NotTo(HaveOccurred())
	}
	take(1, 2, 3, 4)
	taken := len(trail())
	w.Recorded(pool.UID, "10.87.0.1", claim(1), "uid-1", "IPAddress tenant/m1 records it")
	w.Recorded(pool.UID, "10.87.0.2", claim(2), "uid-of-another-claim", "IPAddress tenant/m2 records it")
	w.Recorded("another-incarnation", "10.87.0.3", claim(3), "uid-3", "IPAddress tenant/m3 records it")
	w.Recorded(pool.UID, "10.87.0.4", claim(4), "uid-4", "IPAddress tenant/m4 records it")
	w.NotRecorded("10.87.0.4")

	before := getPool("told").ResourceVersion
	_, err := w.Update(ctx, "told", func(*ippoolv1.NodeIPPool, *ippool.Allocator) (bool, error) { return false, nil })
	Expect(err).NotTo(HaveOccurred())
	Expect(getPool("told").ResourceVersion).To(Equal(before), "a prune alone is never a write")

	take(5)
	now := getPool("told")
	var inFlight []string
	for _, e := range now.Status.InFlight {
		inFlight = append(inFlight, e.IP)
	}
	Expect(inFlight).To(ConsistOf("10.87.0.2", "10.87.0.3", "10.87.0.4", "10.87.0.5"))
	alloc, err := poolstatus.Allocator(now)
	Expect(err).NotTo(HaveOccurred())
	for i := 1; i <= 5; i++ {
		Expect(alloc.HasIP(netip.MustParseAddr(fmt.Sprint("10.87.0.", i)))).To(BeTrue(), "a prune never frees")
	}
	Expect(poolstatus.Vouched(now)).To(BeTrue())
	Expect(trail()[taken:]).To(ConsistOf(
		"recorded 10.87.0.1 IPAddressClaim/tenant/m1 Recorded: IPAddress tenant/m1 records it",
		"taken 10.87.0.5 IPAddressClaim/tenant/m5 : ",
	))

	// What was told is settled by the write: the entry taken again for
	// the same holder and token is not pruned by the next one.
	_, err = w.Update(ctx, "told", func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) (bool, error) {
		poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.87.0.1", Holder: claim(1), Token: "uid-1", Since: metav1.Now()})
		return true, nil
	})
	Expect(err).NotTo(HaveOccurred())
	take(6)
	Expect(poolstatus.InFlightOf(getPool("told"), "10.87.0.1")).NotTo(BeNil())
}
