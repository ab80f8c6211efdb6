package audit

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime/pkg/log"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// pool is a status of pool p over 10.1.0.0/24 with the addresses of bits
// allocated, and entries.
type pool struct {
	bits     []string
	inFlight []ippoolv1.InFlightAddress
	quar     []ippoolv1.QuarantinedAddress
	kept     []ippoolv1.KeptAddress
}

func (p pool) status() *ippoolv1.NodeIPPoolStatus {
	return &ippoolv1.NodeIPPoolStatus{InFlight: p.inFlight, Quarantined: p.quar, KeptForReturn: p.kept}
}

func (p pool) alloc(t *testing.T, r *ippool.Range) *ippool.Allocator {
	t.Helper()
	a := ippool.NewAllocator(r)
	for _, s := range p.bits {
		if err := a.AllocateIP(netip.MustParseAddr(s)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// holders are one holder of each kind, as pool status entries name them.
var holders = []holder.Ref{
	holder.ForEnactment("node01.static-ip"),
	holder.ForPolicyNode("static-ip", "node02"),
	holder.ForClaim("tenant", "m1-eth0"),
}

// TestChangesOfEveryHolderKind: every change of a holding is found from
// the statuses alone, and names its holder, for each kind of holder.
func TestChangesOfEveryHolderKind(t *testing.T) {
	r, err := ippool.NewRange(ippool.Spec{CIDR: "10.1.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	const ip = "10.1.0.7"
	for _, h := range holders {
		name := h.String()
		inFlight := []ippoolv1.InFlightAddress{{IP: ip, Holder: name, Token: "t"}}
		quar := []ippoolv1.QuarantinedAddress{{IP: ip, Holder: name, Node: "node09"}}
		kept := []ippoolv1.KeptAddress{{IP: ip, Holder: name, Node: "node09"}}
		other := []ippoolv1.InFlightAddress{{IP: ip, Holder: "node05.static-ip", Token: "u"}}
		for _, tt := range []struct {
			name          string
			before, after pool
			want          []string // event holder, in order
		}{
			{"taken", pool{}, pool{bits: []string{ip}, inFlight: inFlight}, []string{"taken " + name}},
			{"recorded", pool{bits: []string{ip}, inFlight: inFlight}, pool{bits: []string{ip}}, []string{"recorded " + name}},
			{"withdrawn", pool{bits: []string{ip}, inFlight: inFlight}, pool{}, []string{"withdrawn " + name}},
			{"quarantined", pool{bits: []string{ip}}, pool{bits: []string{ip}, quar: quar}, []string{"quarantined " + name}},
			{"lifted and freed", pool{bits: []string{ip}, quar: quar}, pool{}, []string{"lifted " + name}},
			{"lifted and taken by another", pool{bits: []string{ip}, quar: quar}, pool{bits: []string{ip}, inFlight: other},
				[]string{"taken node05.static-ip", "lifted " + name}},
			{"kept", pool{bits: []string{ip}, quar: quar}, pool{bits: []string{ip}, kept: kept}, []string{"lifted " + name, "kept " + name}},
			{"reclaimed", pool{bits: []string{ip}, kept: kept}, pool{bits: []string{ip}, inFlight: inFlight}, []string{"taken " + name, "reclaimed " + name}},
			{"expired", pool{bits: []string{ip}, kept: kept}, pool{}, []string{"expired " + name}},
			{"forgotten", pool{bits: []string{ip}, inFlight: inFlight}, pool{bits: []string{ip}}, []string{"forgotten " + name}},
			{"nothing changed", pool{bits: []string{ip}, quar: quar}, pool{bits: []string{ip}, quar: quar}, nil},
		} {
			t.Run(h.Title()+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				if tt.name == "forgotten" {
					notes := Notes{}
					notes.Forget(ip, "HolderChanged", "")
					ctx = WithNotes(ctx, notes)
				}
				got := Changes(ctx, "p", r, tt.before.status(), tt.after.status(),
					tt.before.alloc(t, r), tt.after.alloc(t, r), time.Time{})
				var lines []string
				for _, c := range got {
					if c.Address.String() != ip || c.Pool != "p" {
						t.Errorf("change of %s in %s", c.Address, c.Pool)
					}
					lines = append(lines, fmt.Sprintf("%s %s", c.Event, c.Holder))
				}
				if strings.Join(lines, "; ") != strings.Join(tt.want, "; ") {
					t.Errorf("got %q, want %q", lines, tt.want)
				}
			})
		}
	}
}

// TestChangesWithoutHolders: bits set or cleared with no entry are the
// pool's own (a rebuild from the records, garbage collection), with the
// reason the write gives, or each address's note.
func TestChangesWithoutHolders(t *testing.T) {
	r, err := ippool.NewRange(ippool.Spec{CIDR: "10.1.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	before := pool{bits: []string{"10.1.0.1", "10.1.0.2"}}
	after := pool{bits: []string{"10.1.0.2", "10.1.0.3"}}
	notes := Notes{}
	notes.Set("10.1.0.1", "GarbageCollected", "no holder has recorded it for 2m0s")
	ctx := WithNotes(WithReason(context.Background(), "Rebuilt", "from the records"), notes)
	got := Changes(ctx, "p", r, before.status(), after.status(), before.alloc(t, r), after.alloc(t, r), time.Time{})
	want := []string{"10.1.0.1 freed GarbageCollected no holder has recorded it for 2m0s", "10.1.0.3 allocated Rebuilt from the records"}
	var lines []string
	for _, c := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %s", c.Address, c.Event, c.Reason, c.Evidence))
		if c.Holder != (holder.Ref{}) {
			t.Errorf("%s: holder %v", c.Address, c.Holder)
		}
	}
	if strings.Join(lines, "; ") != strings.Join(want, "; ") {
		t.Errorf("got %q, want %q", lines, want)
	}
}

// TestDefaultKeepsTheCallersReason: an operation's usual reason yields to
// one its caller gave.
func TestDefaultKeepsTheCallersReason(t *testing.T) {
	ctx := Default(WithReason(context.Background(), "Reset", "asked"), "Released", "usual")
	if r, e := reasonOf(ctx, netip.MustParseAddr("10.0.0.1")); r != "Reset" || e != "asked" {
		t.Errorf("got %q %q", r, e)
	}
	if r, _ := reasonOf(Default(context.Background(), "Released", "usual"), netip.MustParseAddr("10.0.0.1")); r != "Released" {
		t.Errorf("got %q", r)
	}
}

// TestTrailWritesTheSchema: one log line per change with the documented
// keys, and an Event on the holder (but for Taken) related to the pool.
func TestTrailWritesTheSchema(t *testing.T) {
	var buf bytes.Buffer
	log := funcr.NewJSON(func(obj string) { buf.WriteString(obj + "\n") }, funcr.Options{})
	ctx := ctrl.IntoContext(context.Background(), log)
	rec := events.NewFakeRecorder(10)
	ip := netip.MustParseAddr("10.1.0.7")
	Trail{Events: rec}.Record(ctx, []Change{
		{Event: Taken, Pool: "p", Address: ip, Holder: holders[2]},
		{Event: Quarantined, Pool: "p", Address: ip, Holder: holders[1], Node: "node02", Reason: "Released", Evidence: "its holder gives it up"},
		{Event: Freed, Pool: "p", Address: ip, Reason: "GarbageCollected"},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{
		`"msg":"address holding changed","event":"taken","pool":"p","address":"10.1.0.7","holderKind":"IPAddressClaim","holder":"tenant/m1-eth0","node":"","reason":"","evidence":""`,
		`"event":"quarantined","pool":"p","address":"10.1.0.7","holderKind":"PooledNodeNetworkConfigurationPolicy","holder":"static-ip","node":"node02","reason":"Released","evidence":"its holder gives it up"`,
		`"event":"freed","pool":"p","address":"10.1.0.7","holderKind":"","holder":"","node":"","reason":"GarbageCollected"`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no line has %s:\n%s", want, buf.String())
		}
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Normal AddressQuarantined 10.1.0.7 of NodeIPPool p quarantined, holder node node02 (PooledNodeNetworkConfigurationPolicy static-ip): Released (its holder gives it up)") ||
		!strings.HasPrefix(got[1], "Normal AddressFreed 10.1.0.7 of NodeIPPool p freed: GarbageCollected") {
		t.Errorf("events %q", got)
	}
	if r := Reference(holders[2]); r.APIVersion != "ipam.cluster.x-k8s.io/v1beta2" || r.Kind != "IPAddressClaim" || r.Namespace != "tenant" || r.Name != "m1-eth0" {
		t.Errorf("claim reference %+v", r)
	}
	if r := Reference(holders[0]); r.Kind != "NodeNetworkConfigurationEnactment" || r.Name != "node01.static-ip" {
		t.Errorf("enactment reference %+v", r)
	}
}

func TestListReference(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"10.0.0.4", "10.0.0.9"}, "spec.range{10.0.0.4}"},
		{[]string{"fd00::5 on node a (released)"}, "spec.range{fd00::5}"},
		{[]string{"10.0.0.4 (taken off)"}, "spec.range{10.0.0.4}"},
		{[]string{"node a"}, ""},
		{nil, ""},
	} {
		ref := ListReference("p", tt.names)
		if ref.Kind != "NodeIPPool" || ref.Name != "p" || ref.FieldPath != tt.want {
			t.Errorf("ListReference(%q) = %+v, want NodeIPPool p at %q", tt.names, ref, tt.want)
		}
	}
}
