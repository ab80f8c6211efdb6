package poolwrite_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
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

// TestEveryWriteIsAudited: the writes of an address's life through the
// writer, on a real API server, each tell the trail what changed, for
// whom and why: an address taken for a claim and recorded, one taken for
// an enactment and withdrawn, and the claim's released into quarantine.
func TestEveryWriteIsAudited(t *testing.T) {
	RegisterTestingT(t)
	newPool("audited", "10.83.0.0/24")
	w := poolwrite.NewWriter(k, k, clock.RealClock{})
	trail := auditTrail(w, func(c audit.Change) string { return fmt.Sprintf("%s %s %s %s", c.Event, c.Address, c.Holder, c.Reason) })
	claim := holder.ForClaim("tenant", "m1").String()
	take := func(ip, who, token string) {
		_, err := w.Update(ctx, "audited", func(p *ippoolv1.NodeIPPool, alloc *ippool.Allocator) (bool, error) {
			if err := alloc.AllocateIP(netip.MustParseAddr(ip)); err != nil {
				return false, err
			}
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: ip, Holder: who, Token: token, Since: metav1.Now()})
			return true, nil
		})
		Expect(err).NotTo(HaveOccurred())
	}
	take("10.83.0.1", claim, "t1")
	_, err := w.Update(ctx, "audited", func(p *ippoolv1.NodeIPPool, _ *ippool.Allocator) (bool, error) {
		poolstatus.RemoveInFlight(p, "10.83.0.1")
		return true, nil
	})
	Expect(err).NotTo(HaveOccurred())
	take("10.83.0.2", "node01.static-ip", "t2")
	Expect(w.Withdraw(ctx, "audited", "node01.static-ip", "t2", []string{"10.83.0.2"})).To(Equal([]string{"10.83.0.2"}))
	_, err = w.Quarantine(ctx, poolwrite.Holder{Ref: holder.Parse(claim), Node: "node07"},
		ippoolv1.EnactmentIPPools{"audited": {Allocated: []string{"10.83.0.1"}}})
	Expect(err).NotTo(HaveOccurred())

	Expect(trail()).To(Equal([]string{
		"taken 10.83.0.1 IPAddressClaim/tenant/m1 ",
		"recorded 10.83.0.1 IPAddressClaim/tenant/m1 ",
		"taken 10.83.0.2 node01.static-ip ",
		"withdrawn 10.83.0.2 node01.static-ip Withdrawn",
		"quarantined 10.83.0.1 IPAddressClaim/tenant/m1 Released",
	}))
}

// auditTrail makes w tell its audit trail to the lines it returns, each
// change written by line.
func auditTrail(w *poolwrite.Writer, line func(audit.Change) string) func() []string {
	var (
		mu  sync.Mutex
		got []string
	)
	w.Audit = func(_ context.Context, changes []audit.Change) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range changes {
			got = append(got, line(c))
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}
