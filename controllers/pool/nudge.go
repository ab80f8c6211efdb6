package pool

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// nudgeOf is an enactment to nudge, and the reason (the wait it ends, or
// the address it must replace) that it is not nudged for twice.
type nudgeOf struct {
	enactment *nncev1beta1.NodeNetworkConfigurationEnactment
	key       string
}

// toNudge returns the enactments whose handlers should look at pool again
// now. While the pool serves: every enactment waiting for it to become
// available, and as many of those that found it full as it has free
// addresses, longest waiting first (status.waitingForIPPool). Always: the
// enactments holding an address of outside, which the range no longer
// hands out. done holds the keys already nudged for, by enactment.
func toNudge(pool *ippoolv1.NodeIPPool, v view, done map[string]string) []nudgeOf {
	var out []nudgeOf
	for _, ip := range v.audit.Outside {
		for _, o := range v.owners[ip] {
			if o.Holder.Foreign() {
				continue // a Cluster API claim keeps its address (IPAddresses are immutable); a pooled policy's controller moves its own
			}
			if key := "outside:" + ip.String(); done[o.Holder.Name] != key {
				if e := findEnactment(v.holdings.enactments, o.Holder.Name); e != nil {
					out = append(out, nudgeOf{enactment: e, key: key})
				}
			}
		}
	}
	c := conditionOf(pool)
	if c == nil || (c.Status != metav1.ConditionTrue && c.Reason != ippoolv1.ReasonExhaustedIPPool) {
		return out
	}
	var full []*nncev1beta1.NodeNetworkConfigurationEnactment
	for i := range v.holdings.enactments {
		e := &v.holdings.enactments[i]
		if e.Status.WaitingForIPPool != pool.Name || done[e.Name] == waitKey(e) || !e.DeletionTimestamp.IsZero() ||
			pendingFor(e, ippoolv1.ReasonIPPoolBusy) {
			continue // busy ones are served, not nudged
		}
		if exhaustedPool(e) == pool.Name {
			full = append(full, e)
		} else {
			out = append(out, nudgeOf{enactment: e, key: waitKey(e)})
		}
	}
	slices.SortFunc(full, func(a, b *nncev1beta1.NodeNetworkConfigurationEnactment) int {
		return failingSince(a).Compare(failingSince(b).Time)
	})
	for _, e := range full[:int(min(pool.Status.Free, int64(len(full))))] {
		out = append(out, nudgeOf{enactment: e, key: waitKey(e)})
	}
	return out
}

func findEnactment(enactments []nncev1beta1.NodeNetworkConfigurationEnactment, name string) *nncev1beta1.NodeNetworkConfigurationEnactment {
	for i := range enactments {
		if enactments[i].Name == name {
			return &enactments[i]
		}
	}
	return nil
}

// waitKey names the enactment's current wait: the reason of its True
// condition and when it became True.
func waitKey(e *nncev1beta1.NodeNetworkConfigurationEnactment) string {
	for _, c := range e.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("%s@%s", c.Reason, c.LastTransitionTime.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// pendingFor reports whether the enactment is Pending for reason.
func pendingFor(e *nncev1beta1.NodeNetworkConfigurationEnactment, reason string) bool {
	c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionPending)
	return c != nil && c.Status == corev1.ConditionTrue && string(c.Reason) == reason
}

// failingSince returns when the enactment started failing.
func failingSince(e *nncev1beta1.NodeNetworkConfigurationEnactment) metav1.Time {
	if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionFailing); c != nil && c.Status == corev1.ConditionTrue {
		return c.LastTransitionTime
	}
	return metav1.Time{}
}

// nudge sets the nudge annotation on the enactments toNudge returns, so
// that their handlers, which watch only their own enactments, look again;
// the handler removes it when it does. A failed nudge is logged: handlers
// also look again on their own, later.
func (r server) nudge(ctx context.Context, pool *ippoolv1.NodeIPPool, v view) {
	m := r.remember(pool)
	if m.serving.nudged == nil {
		m.serving.nudged = map[string]string{}
	}
	for _, n := range toNudge(pool, v, m.serving.nudged) {
		patch := client.RawPatch(client.Merge.Type(),
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, ippoolv1.NudgeAnnotation, n.key))
		if err := r.Client.Patch(ctx, n.enactment.DeepCopy(), patch); err != nil && !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "could not nudge an enactment", "enactment", n.enactment.Name)
			continue
		}
		m.serving.nudged[n.enactment.Name] = n.key
		ctrl.LoggerFrom(ctx).V(1).Info("nudged an enactment", "enactment", n.enactment.Name, "why", n.key)
	}
}
