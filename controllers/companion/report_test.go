package companion

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// TestReportRenderSaysChangesOnly: a node rendered again at every pass
// (its render not final) raises its Warning once, and again only when
// what it says changes; a read the caches have not caught up with is
// logged, never an Event.
func TestReportRenderSaysChangesOnly(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	w := &world{policy: &ippoolv1.PooledNodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
	ip := netip.MustParseAddr("10.0.0.5")
	stays := func(iface string) rendered {
		return rendered{moves: netstate.Moves{Stays: map[netip.Addr]string{ip: iface}}}
	}
	unreadable := rendered{failed: fmt.Errorf("NodeNetworkState n1 %w: read the current state: bad", errUnreadable).Error(), unreadable: true}
	lagging := rendered{failed: errors.New("read NodeNetworkState n1: timeout").Error()}
	for _, step := range []struct {
		name  string
		prev  *rendered
		now   rendered
		warns int
	}{
		{"first render", nil, stays("eth2"), 1},
		{"the same again", new(stays("eth2")), stays("eth2"), 0},
		{"on another interface", new(stays("eth2")), stays("eth1"), 1},
		{"unreadable", new(stays("eth1")), unreadable, 1},
		{"unreadable again", &unreadable, unreadable, 0},
		{"a lagging read", nil, lagging, 0},
		{"nothing stays", &unreadable, rendered{}, 0},
	} {
		r.reportRender(context.Background(), w, "n1", step.prev, step.now)
		if got := len(rec.Events); got != step.warns {
			t.Errorf("%s: %d Events, want %d", step.name, got, step.warns)
		}
		for range len(rec.Events) {
			<-rec.Events
		}
	}
}
