package claim

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

func TestSetConditions(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	exhausted := notReady(capi.ReasonPoolExhausted, "NodeIPPool p has no address left")
	served := ready("10.0.0.1/24 from NodeIPPool p")
	for _, tc := range []struct {
		name    string
		version string
		first   condition
		second  condition
		// path is where the Ready condition is read; want its fields
		// after the second write, changed what the second write reports.
		path    []string
		want    map[string]any
		changed bool
	}{{
		name: "v1beta2: a transition moves the time", version: "v1beta2", first: exhausted, second: served,
		path:    []string{"status", "conditions"},
		want:    map[string]any{"type": "Ready", "status": "True", "reason": "AddressAllocated", "message": served.message, "observedGeneration": int64(3), "lastTransitionTime": t1.Format(time.RFC3339)},
		changed: true,
	}, {
		name: "v1beta2: the same status keeps the time, a new message is written", version: "v1beta2", first: exhausted,
		second:  notReady(capi.ReasonPoolExhausted, "NodeIPPool p has no address left (2 of 2)"),
		path:    []string{"status", "conditions"},
		want:    map[string]any{"type": "Ready", "status": "False", "reason": "PoolExhausted", "message": "NodeIPPool p has no address left (2 of 2)", "observedGeneration": int64(3), "lastTransitionTime": t0.Format(time.RFC3339)},
		changed: true,
	}, {
		name: "v1beta2: nothing new, nothing written", version: "v1beta2", first: served, second: served,
		path:    []string{"status", "conditions"},
		want:    map[string]any{"type": "Ready", "status": "True", "reason": "AddressAllocated", "message": served.message, "observedGeneration": int64(3), "lastTransitionTime": t0.Format(time.RFC3339)},
		changed: false,
	}, {
		name: "v1beta2 writes v1beta1's conditions for converting clients", version: "v1beta2", first: served, second: exhausted,
		path:    []string{"status", "deprecated", "v1beta1", "conditions"},
		want:    map[string]any{"type": "Ready", "status": "False", "severity": "Error", "reason": "PoolExhausted", "message": exhausted.message, "lastTransitionTime": t1.Format(time.RFC3339)},
		changed: true,
	}, {
		name: "v1beta1: a severity, no observedGeneration", version: "v1beta1", first: served, second: notReady(capi.ReasonPoolNotReady, "NodeIPPool p is not available"),
		path:    []string{"status", "conditions"},
		want:    map[string]any{"type": "Ready", "status": "False", "severity": "Warning", "reason": "PoolNotReady", "message": "NodeIPPool p is not available", "lastTransitionTime": t1.Format(time.RFC3339)},
		changed: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			u := capi.NewClaim(tc.version)
			u.SetGeneration(3)
			if !setConditions(u, tc.version, t0, tc.first) {
				t.Fatal("the first write changed nothing")
			}
			if changed := setConditions(u, tc.version, t1, tc.second); changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			list, _, _ := unstructured.NestedSlice(u.Object, tc.path...)
			if len(list) != 1 {
				t.Fatalf("%v holds %d conditions, want 1: %v", tc.path, len(list), list)
			}
			got := list[0].(map[string]any)
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for key, want := range tc.want {
				if got[key] != want {
					t.Errorf("%s = %v, want %v", key, got[key], want)
				}
			}
		})
	}
}

func TestTakeRequestedRefusals(t *testing.T) {
	for _, tc := range []struct{ requested, want string }{
		{"nonsense", "annotation ipAddress=nonsense: not an IP address; write one address of NodeIPPool p, or remove the annotation"},
		{"10.0.1.5", "annotation ipAddress=10.0.1.5: NodeIPPool p does not hand it out"},
		{"10.0.0.9", "annotation ipAddress=10.0.0.9: on the network of node n2 (its NodeNetworkState shows it), though no holder records it"},
	} {
		p, alloc := testPool(t)
		_, c := takeRequested(p, alloc, tc.requested, map[netip.Addr][]string{netip.MustParseAddr("10.0.0.9"): {"n2"}})
		if c == nil || c.reason != capi.ReasonAllocationFailed || len(c.message) < len(tc.want) || c.message[:len(tc.want)] != tc.want {
			t.Errorf("takeRequested(%q) = %+v, want AllocationFailed %q", tc.requested, c, tc.want)
		}
		if alloc.Count() != 0 {
			t.Errorf("takeRequested(%q) allocated %d addresses", tc.requested, alloc.Count())
		}
	}
	p, alloc := testPool(t)
	if ip, c := takeRequested(p, alloc, "10.0.0.7", nil); c != nil || ip.String() != "10.0.0.7" || alloc.Count() != 1 {
		t.Errorf("takeRequested(10.0.0.7) = %v, %+v with %d allocated", ip, c, alloc.Count())
	}
}

// testPool returns a pool of 10.0.0.0/24 with its allocator.
func testPool(t *testing.T) (*ippoolv1.NodeIPPool, *ippool.Allocator) {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24"}}}
	rng, err := poolstatus.Range(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, ippool.NewAllocator(rng)
}

// TestTakeBack: a restored claim takes its old address back when nothing
// else holds it: free, or set and recorded by no one else (its own bit,
// not collected yet); not when another holder's entry or record holds it,
// and the records are read only when the bit is set.
func TestTakeBack(t *testing.T) {
	nobody := func() (string, error) { return "", nil }
	for _, tc := range []struct {
		name  string
		setup func(*ippoolv1.NodeIPPool, *ippool.Allocator)
		other func() (string, error)
		want  string // the refusal, or "" when taken
	}{
		{"free", nil, func() (string, error) { t.Error("records read for a free address"); return "", nil }, ""},
		{"its own bit, not collected yet", func(_ *ippoolv1.NodeIPPool, a *ippool.Allocator) {
			mustAllocate(t, a, "10.0.0.7")
		}, nobody, ""},
		{"collected and taken by a node since", func(_ *ippoolv1.NodeIPPool, a *ippool.Allocator) {
			mustAllocate(t, a, "10.0.0.7")
		}, func() (string, error) { return "node n1 (enactment n1.p)", nil },
			"the address 10.0.0.7 of its deleted IPAddress is held by node n1 (enactment n1.p) in NodeIPPool p"},
		{"in flight to another holder", func(p *ippoolv1.NodeIPPool, a *ippool.Allocator) {
			mustAllocate(t, a, "10.0.0.7")
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.7", Holder: holder.ForEnactment("n2.p").String()})
		}, nobody, "the address 10.0.0.7 of its deleted IPAddress is being allocated to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, alloc := testPool(t)
			if tc.setup != nil {
				tc.setup(p, alloc)
			}
			ip, c, err := takeBack(p, alloc, "10.0.0.7", tc.other)
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.want == "" && (c != nil || ip.String() != "10.0.0.7" || !alloc.HasIP(ip)):
				t.Errorf("takeBack = %v, %+v; want 10.0.0.7 taken", ip, c)
			case tc.want != "" && (c == nil || !strings.HasPrefix(c.message, tc.want)):
				t.Errorf("takeBack = %v, %+v; want the refusal %q", ip, c, tc.want)
			}
		})
	}
	p, alloc := testPool(t)
	mustAllocate(t, alloc, "10.0.0.7")
	if _, _, err := takeBack(p, alloc, "10.0.0.7", func() (string, error) { return "", errors.New("list enactments: timeout") }); err == nil {
		t.Error("takeBack took an address whose records could not be read")
	}
}

func mustAllocate(t *testing.T, a *ippool.Allocator, s string) {
	t.Helper()
	if err := a.AllocateIP(netip.MustParseAddr(s)); err != nil {
		t.Fatal(err)
	}
}
