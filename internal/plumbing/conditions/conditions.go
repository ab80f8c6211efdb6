// Package conditions computes kubernetes-nmstate style condition lists
// (shared.ConditionList) for the objects the handler writes: enactments,
// policies and node network states. Times move only when something
// changes, so that writing the same outcome again writes nothing new.
package conditions

import (
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Merge returns want with the times of old carried over: the transition
// time moves when the status flips, the heartbeat when status, reason or
// message change. Times have a resolution of one second.
func Merge(old *shared.Condition, want shared.Condition, now time.Time) shared.Condition {
	ts := metav1.NewTime(now.Truncate(time.Second))
	if old == nil {
		want.LastTransitionTime, want.LastHeartbeatTime = ts, ts
		return want
	}
	want.LastTransitionTime, want.LastHeartbeatTime = old.LastTransitionTime, old.LastHeartbeatTime
	if old.Status != want.Status {
		want.LastTransitionTime = ts
	}
	if old.Status != want.Status || old.Reason != want.Reason || old.Message != want.Message {
		want.LastHeartbeatTime = ts
	}
	return want
}

// OneTrue returns the conditions of types, in that order, with trueType
// True (with reason and message) and every other one False, merged with
// old.
func OneTrue(old shared.ConditionList, types []shared.ConditionType, trueType shared.ConditionType,
	reason shared.ConditionReason, message string, now time.Time) shared.ConditionList {
	out := make(shared.ConditionList, 0, len(types))
	for _, t := range types {
		want := shared.Condition{Type: t, Status: corev1.ConditionFalse}
		if t == trueType {
			want = shared.Condition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message}
		}
		out = append(out, Merge(old.Find(t), want, now))
	}
	return out
}

// Enactment returns an enactment's conditions, in the order of
// shared.NodeNetworkConfigurationEnactmentConditionTypes, with trueType
// True (with reason and message), merged with old, with the rules
// kubernetes-nmstate's handler writes them by: every other condition
// carries the same reason and no message, but Aborted, whose reason stays
// SuccessfullyConfigured while the enactment fails, and, while it
// progresses, Failing and Available, which are Unknown. Where it differs:
// one condition only is True (upstream's Retrying makes Progressing True
// beside Failing) and the True one alone has a message (upstream's
// Pending gives Progressing its message too).
func Enactment(old shared.ConditionList, trueType shared.ConditionType, reason shared.ConditionReason,
	message string, now time.Time) shared.ConditionList {
	types := shared.NodeNetworkConfigurationEnactmentConditionTypes
	out := make(shared.ConditionList, 0, len(types))
	for _, t := range types {
		want := shared.Condition{Type: t, Status: corev1.ConditionFalse, Reason: reason}
		switch {
		case t == trueType:
			want.Status, want.Message = corev1.ConditionTrue, message
		case t == shared.NodeNetworkConfigurationEnactmentConditionAborted &&
			trueType == shared.NodeNetworkConfigurationEnactmentConditionFailing:
			want.Reason = shared.NodeNetworkConfigurationEnactmentConditionSuccessfullyConfigured
		case trueType == shared.NodeNetworkConfigurationEnactmentConditionProgressing &&
			(t == shared.NodeNetworkConfigurationEnactmentConditionFailing || t == shared.NodeNetworkConfigurationEnactmentConditionAvailable):
			want.Status = corev1.ConditionUnknown
		}
		out = append(out, Merge(old.Find(t), want, now))
	}
	return out
}

// Same reports whether two lists hold the same conditions, ignoring times.
func Same(a, b shared.ConditionList) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		o := b.Find(c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	return true
}

// TrueType returns the type of the list's True condition, or "" if none is
// True. The lists this package computes have at most one.
func TrueType(list shared.ConditionList) shared.ConditionType {
	for _, c := range list {
		if c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// TrueTypeOr returns the type of the list's True condition, or none when
// no condition is True: for messages and metrics.
func TrueTypeOr(list shared.ConditionList, none string) string {
	if t := TrueType(list); t != "" {
		return string(t)
	}
	return none
}

// IsTrueWith reports whether the list's condition t is True with reason.
func IsTrueWith(list shared.ConditionList, t shared.ConditionType, reason shared.ConditionReason) bool {
	c := list.Find(t)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason == reason
}
