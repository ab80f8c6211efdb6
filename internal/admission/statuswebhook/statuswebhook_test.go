package statuswebhook

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// base is the pool the cases change, as node w1 (enactment w1.a, which
// records 10.0.0.6) finds it: node w2 records 10.0.0.2 and takes 10.0.0.3;
// 10.0.0.4 is quarantined since w2 released it; 10.0.0.5 is kept for w3's
// return; 10.0.0.7 is quarantined since w1 released it; w1 is taking
// 10.0.0.9.
func base(t *testing.T) *ippoolv1.NodeIPPool {
	t.Helper()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: "10.0.0.0/24", Start: "10.0.0.1", End: "10.0.0.20"}}}
	p.Status.InFlight = []ippoolv1.InFlightAddress{{IP: "10.0.0.3", Holder: "w2.a", Token: "1"}, {IP: "10.0.0.9", Holder: "w1.a", Token: "2"}}
	p.Status.Quarantined = []ippoolv1.QuarantinedAddress{{IP: "10.0.0.4", Node: "w2", Holder: "w2.a"}, {IP: "10.0.0.7", Node: "w1", Holder: "w1.a"}}
	p.Status.KeptForReturn = []ippoolv1.KeptAddress{{IP: "10.0.0.5", Node: "w3", Holder: "w3.a"}}
	setBits(t, p, func(a *ippool.Allocator) {
		for _, s := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.6", "10.0.0.7", "10.0.0.9"} {
			_ = a.AllocateIP(netip.MustParseAddr(s))
		}
	})
	return p
}

// legacy names the holder of every entry of p in the deprecated field
// only, as versions before holder existed wrote them.
func legacy(p *ippoolv1.NodeIPPool) {
	for i := range p.Status.InFlight {
		e := &p.Status.InFlight[i]
		e.Holder, e.DeprecatedEnactment = "", e.HolderName()
	}
	for i := range p.Status.Quarantined {
		q := &p.Status.Quarantined[i]
		q.Holder, q.DeprecatedEnactment = "", q.HolderName()
	}
	for i := range p.Status.KeptForReturn {
		k := &p.Status.KeptForReturn[i]
		k.Holder, k.DeprecatedEnactment = "", k.HolderName()
	}
}

// setBits changes the bitmap of p.
func setBits(t *testing.T, p *ippoolv1.NodeIPPool, change func(*ippool.Allocator)) {
	t.Helper()
	a, err := poolstatus.Allocator(p)
	if err != nil {
		rng, err := poolstatus.Range(p)
		if err != nil {
			t.Fatal(err)
		}
		a = ippool.NewAllocator(rng)
	}
	change(a)
	poolstatus.Set(p, a)
}

func set(ips ...string) func(*ippool.Allocator) {
	return func(a *ippool.Allocator) {
		for _, s := range ips {
			_ = a.AllocateIP(netip.MustParseAddr(s))
		}
	}
}

func unset(ips ...string) func(*ippool.Allocator) {
	return func(a *ippool.Allocator) {
		for _, s := range ips {
			_ = a.ReleaseIP(netip.MustParseAddr(s))
		}
	}
}

func TestForeign(t *testing.T) {
	own := []nncev1beta1.NodeNetworkConfigurationEnactment{{ObjectMeta: metav1.ObjectMeta{Name: "w1.a"}}}
	own[0].Status.IPPool = ippoolv1.EnactmentIPPools{"p": {Allocated: []string{"10.0.0.6"}}}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, p *ippoolv1.NodeIPPool)
		says   []string // empty: admitted
		// before, if set, changes the pool as w1 finds it.
		before func(*testing.T, *ippoolv1.NodeIPPool)
	}{
		{"take a free address", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.8", Holder: "w1.a", Token: "3"})
			setBits(t, p, set("10.0.0.8"))
		}, nil, nil},
		{"withdraw its own entry", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.9")
			setBits(t, p, unset("10.0.0.9"))
		}, nil, nil},
		{"release its own address into quarantine", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.6", Node: "w1", Holder: "w1.a"})
		}, nil, nil},
		{"take back its own quarantined address", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			q := *poolstatus.QuarantineOf(p, "10.0.0.7")
			poolstatus.RemoveQuarantine(p, "10.0.0.7")
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.7", Holder: "w1.a", Token: "3", Returning: &q})
		}, nil, nil},
		{"adopt the address held for w1, which carries it", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			q := *poolstatus.QuarantineOf(p, "10.0.0.12")
			poolstatus.RemoveQuarantine(p, "10.0.0.12")
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.12", Holder: "w1.a", Token: "3", Returning: &q})
		}, nil, func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.12", Node: "w1"})
			setBits(t, p, set("10.0.0.12"))
		}},
		{"withdraw an adoption: the address held for w1 again", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.12")
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.12", Node: "w1"})
		}, nil, func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.12", Holder: "w1.a", Token: "3",
				Returning: &ippoolv1.QuarantinedAddress{IP: "10.0.0.12", Node: "w1"}})
			setBits(t, p, set("10.0.0.12"))
		}},
		{"take the address kept longest, the pool full", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			k := *poolstatus.KeptOf(p, "10.0.0.5")
			poolstatus.RemoveKept(p, "10.0.0.5")
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.5", Holder: "w1.a", Token: "3", Kept: &k})
			setBits(t, p, set("10.0.0.5"))
		}, nil, nil},
		{"set the missing bit of its own record", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			setBits(t, p, set("10.0.0.6"))
		}, nil, func(t *testing.T, p *ippoolv1.NodeIPPool) { setBits(t, p, unset("10.0.0.6")) }},
		{"give back a kept address it took", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.11")
			poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.11", Node: "w3", Holder: "w3.b"})
			setBits(t, p, unset("10.0.0.11"))
		}, nil, func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.11", Holder: "w1.a", Token: "4",
				Kept: &ippoolv1.KeptAddress{IP: "10.0.0.11", Node: "w3", Holder: "w3.b"}})
			setBits(t, p, set("10.0.0.11"))
		}},
		{"take a free address from a pool written before holder existed", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			p.Status.MirrorHolders() // as every writer does
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.8", Holder: "w1.a", DeprecatedEnactment: "w1.a", Token: "3"})
			setBits(t, p, set("10.0.0.8"))
		}, nil, func(_ *testing.T, p *ippoolv1.NodeIPPool) { legacy(p) }},
		{"release its own address on an unreadable bitmap", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.6", Node: "w1", Holder: "w1.a"})
		}, nil, func(_ *testing.T, p *ippoolv1.NodeIPPool) { p.Status.AllocatedOffsets = "garbage" }},

		{"quarantine an address another node carries", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.10", Node: "w2"})
			setBits(t, p, set("10.0.0.10"))
		}, []string{"the quarantine of 10.0.0.10 for node w2 is not node w1's release of its own address"}, nil},
		{"hold a free address for itself, as if found on w1", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.8", Node: "w1"})
			setBits(t, p, set("10.0.0.8"))
		}, []string{"the quarantine of 10.0.0.8 for node w1 is not node w1's release of its own address"}, nil},
		{"withdraw an entry into a hold it did not come from", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.9")
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.9", Node: "w1"})
		}, []string{"the quarantine of 10.0.0.9 for node w1 is not node w1's release of its own address"}, nil},
		{"take a free address naming another node's address as the quarantine it came from", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.8", Holder: "w1.a", Token: "3",
				Returning: &ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Node: "w1"}})
			setBits(t, p, set("10.0.0.8"))
		}, []string{"the in-flight entry of enactment w1.a for 10.0.0.8 names a quarantine it does not lift"}, nil},
		{"take a free address naming a kept address it does not take", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			k := *poolstatus.KeptOf(p, "10.0.0.5")
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.8", Holder: "w1.a", Token: "3", Kept: &k})
			setBits(t, p, set("10.0.0.8"))
		}, []string{"the in-flight entry of enactment w1.a for 10.0.0.8 names a kept address it does not take"}, nil},
		{"take back its own quarantined address, naming it otherwise", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			q := *poolstatus.QuarantineOf(p, "10.0.0.7")
			poolstatus.RemoveQuarantine(p, "10.0.0.7")
			q.Holder = "w2.a"
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.7", Holder: "w1.a", Token: "3", Returning: &q})
		}, []string{"the in-flight entry of enactment w1.a for 10.0.0.7 names a quarantine it does not lift"}, nil},
		{"withdraw an adoption into a hold that names another holder", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.12")
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.12", Node: "w1", Holder: "w3.b", Capture: "c"})
		}, []string{"the quarantine of 10.0.0.12 for node w1 is not node w1's release of its own address"},
			func(t *testing.T, p *ippoolv1.NodeIPPool) {
				poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.12", Holder: "w1.a", Token: "3",
					Returning: &ippoolv1.QuarantinedAddress{IP: "10.0.0.12", Node: "w1", Holder: "w3.b", Capture: "c"}})
				setBits(t, p, set("10.0.0.12"))
			}},
		{"plant a quarantine on another node's address", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddQuarantine(p, ippoolv1.QuarantinedAddress{IP: "10.0.0.2", Node: "w1", Holder: "w1.a"})
		}, []string{"the quarantine of 10.0.0.2 for node w1 is not node w1's release of its own address"}, nil},
		{"take an address in use, to withdraw it later", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.2", Holder: "w1.a", Token: "5"})
		}, []string{"the in-flight entry of enactment w1.a takes 10.0.0.2, which is in use"}, nil},

		{"clear another node's bit", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			setBits(t, p, unset("10.0.0.2"))
		}, []string{"the bit of 10.0.0.2 is cleared, and node w1 withdraws no entry of its own for it"}, nil},
		{"drop another node's entry and its bit", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveInFlight(p, "10.0.0.3")
			setBits(t, p, unset("10.0.0.3"))
		}, []string{"the in-flight entry of enactment w2.a for 10.0.0.3 is not node w1's", "the bit of 10.0.0.3 is cleared"}, nil},
		{"drop another node's entry written before holder existed", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			p.Status.MirrorHolders()
			poolstatus.RemoveInFlight(p, "10.0.0.3")
			setBits(t, p, unset("10.0.0.3"))
		}, []string{"the in-flight entry of enactment w2.a for 10.0.0.3 is not node w1's"}, func(_ *testing.T, p *ippoolv1.NodeIPPool) { legacy(p) }},
		{"plant an entry for another node's enactment", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddInFlight(p, ippoolv1.InFlightAddress{IP: "10.0.0.2", Holder: "w3.a", Token: "9"})
		}, []string{"the in-flight entry of enactment w3.a for 10.0.0.2 is not node w1's"}, nil},
		{"lift another node's quarantine", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveQuarantine(p, "10.0.0.4")
			setBits(t, p, unset("10.0.0.4"))
		}, []string{"the quarantine of 10.0.0.4 released by node w2 is not node w1's to lift or change", "the bit of 10.0.0.4 is cleared"}, nil},
		{"confirm another node's release", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			confirmed := metav1.Now()
			p.Status.Quarantined[0].StateSeenAtRelease = &confirmed
		}, []string{"the quarantine of 10.0.0.4 released by node w2 is not node w1's to lift or change"}, nil},
		{"drop an address kept for another node", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.RemoveKept(p, "10.0.0.5")
		}, []string{"the address 10.0.0.5 kept for node w3 is dropped without node w1 taking it"}, nil},
		{"keep an address in use for another node", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			poolstatus.AddKept(p, ippoolv1.KeptAddress{IP: "10.0.0.2", Node: "w3", Holder: "w3.a"})
		}, []string{"the address 10.0.0.2 cannot be kept for node w3 by node w1"}, nil},
		{"mark the pool Available", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			p.Status.Conditions = []metav1.Condition{{Type: ippoolv1.ConditionAvailable, Status: metav1.ConditionTrue}}
		}, []string{"the conditions are the pool controller's"}, nil},
		{"set a bit nothing names", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			setBits(t, p, set("10.0.0.13"))
		}, []string{"the bit of 10.0.0.13 is set, and no entry or record of node w1 names it"}, nil},
		{"empty the bitmap", func(t *testing.T, p *ippoolv1.NodeIPPool) {
			p.Status.AllocatedOffsets = ""
		}, []string{"the bit of 10.0.0.2 is cleared"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			older := base(t)
			if tc.before != nil {
				tc.before(t, older)
			}
			newer := older.DeepCopy()
			tc.change(t, newer)
			got := Foreign(older, newer, "w1", own)
			if len(tc.says) == 0 {
				if len(got) > 0 {
					t.Errorf("refused: %v", got)
				}
				return
			}
			joined := strings.Join(got, "; ")
			for _, want := range tc.says {
				if !strings.Contains(joined, want) {
					t.Errorf("problems %q, want one saying %q", joined, want)
				}
			}
		})
	}
}

// TestHandle: a write that changes another node's entries is refused to
// credentials bound to w1, and admitted to the pool controller's own
// (Self), though node-bound too, and to credentials bound to no node.
func TestHandle(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	older := base(t)
	newer := older.DeepCopy()
	setBits(t, newer, unset("10.0.0.2"))
	raw := func(p *ippoolv1.NodeIPPool) runtime.RawExtension {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	v := &Validator{Reader: fake.NewClientBuilder().WithScheme(s).Build(), Decoder: admission.NewDecoder(s),
		Self: "system:serviceaccount:ns:pool-controller"}
	request := func(user string, extra map[string]authenticationv1.ExtraValue) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{Username: user, Extra: extra}, Object: raw(newer), OldObject: raw(older)}}
	}
	onW1 := map[string]authenticationv1.ExtraValue{NodeClaim: {"w1"}}
	for _, tc := range []struct {
		name    string
		req     admission.Request
		allowed bool
	}{
		{"a handler on w1", request("system:serviceaccount:ns:handler", onW1), false},
		{"the pool controller, on w1", request(v.Self, onW1), true},
		{"an admin", request("admin", nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := v.Handle(context.Background(), tc.req)
			if got.Allowed != tc.allowed {
				t.Errorf("allowed %v (%v), want %v", got.Allowed, got.Result, tc.allowed)
			}
			if !got.Allowed && !strings.Contains(got.Result.Message, "system:serviceaccount:ns:handler (node w1) may change in the status of "+
				"NodeIPPool p only its own node's entries: the bit of 10.0.0.2 is cleared") {
				t.Errorf("refusal says %q", got.Result.Message)
			}
		})
	}
}
