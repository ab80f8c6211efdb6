package claim

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// condition is one condition a reconcile decides for a claim.
type condition struct {
	typ     string
	status  metav1.ConditionStatus
	reason  string
	message string
	// carried is set on an exhausted pool's condition when free addresses
	// are left that nodes' networks carry: no pool write tells when one
	// is taken off, so the claim is looked at again (carriedAgain).
	carried bool
}

func ready(message string) condition {
	return condition{typ: capi.ConditionReady, status: metav1.ConditionTrue, reason: capi.ReasonAllocated, message: message}
}

func notReady(reason, message string) condition {
	return condition{typ: capi.ConditionReady, status: metav1.ConditionFalse, reason: reason, message: message}
}

// paused is the Paused condition of a claim paused for why, or not
// paused when why is "".
func paused(why string) condition {
	if why != "" {
		return condition{typ: capi.ConditionPaused, status: metav1.ConditionTrue, reason: capi.ReasonPaused,
			message: "Paused by the " + why + ": the claim is left as it is"}
	}
	return condition{typ: capi.ConditionPaused, status: metav1.ConditionFalse, reason: capi.ReasonNotPaused}
}

// setConditions sets cs on the claim u of version, as that version writes
// them: v1beta2 in status.conditions (metav1.Condition, with the
// observedGeneration) and, for clients of v1beta1 reading through Cluster
// API's conversion, in status.deprecated.v1beta1.conditions; v1beta1 in
// status.conditions with a severity. A condition's transition time moves
// only when its status does. It reports whether anything changed.
func setConditions(u *unstructured.Unstructured, version string, now time.Time, cs ...condition) bool {
	changed := false
	for _, c := range cs {
		if version == "v1beta1" {
			changed = setIn(u, c, now, false, "status", "conditions") || changed
			continue
		}
		changed = setIn(u, c, now, true, "status", "conditions") || changed
		if c.typ == capi.ConditionReady {
			changed = setIn(u, c, now, false, "status", "deprecated", "v1beta1", "conditions") || changed
		}
	}
	return changed
}

// setIn sets c in the condition list at path: metav1.Condition fields when
// modern, Cluster API v1beta1's (with a severity) otherwise.
func setIn(u *unstructured.Unstructured, c condition, now time.Time, modern bool, path ...string) bool {
	list, _, _ := unstructured.NestedSlice(u.Object, path...)
	want := map[string]any{"type": c.typ, "status": string(c.status), "reason": c.reason}
	switch {
	case modern:
		want["message"] = c.message
		want["observedGeneration"] = u.GetGeneration()
	case c.status != metav1.ConditionTrue:
		want["severity"] = severity(c)
		fallthrough
	default:
		if c.message != "" {
			want["message"] = c.message
		}
	}
	at := len(list)
	for i, item := range list {
		if m, ok := item.(map[string]any); ok && m["type"] == c.typ {
			at = i
			want["lastTransitionTime"] = m["lastTransitionTime"]
			if m["status"] != want["status"] || want["lastTransitionTime"] == nil {
				want["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
			}
			if equalCondition(m, want) {
				return false
			}
		}
	}
	if at == len(list) {
		want["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
		list = append(list, want)
	} else {
		list[at] = want
	}
	if err := unstructured.SetNestedSlice(u.Object, list, path...); err != nil {
		return false
	}
	return true
}

// severity is the v1beta1 severity of a condition that is not True: a
// paused claim is Info, a refusal an Error, a wait a Warning.
func severity(c condition) string {
	switch c.reason {
	case capi.ReasonPaused, capi.ReasonNotPaused:
		return "Info"
	case capi.ReasonPoolNotReady:
		return "Warning"
	}
	return "Error"
}

func equalCondition(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		av, ok := a[k]
		if !ok {
			return false
		}
		// Numbers come back from the API server as int64, and are set here
		// as int64: compare them as written.
		if av != v {
			return false
		}
	}
	return true
}

// transitioned reports whether c changes the status or reason its type has
// on the claim u: what an Event tells.
func transitioned(u *unstructured.Unstructured, c condition) bool {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, item := range list {
		if m, ok := item.(map[string]any); ok && m["type"] == c.typ {
			return m["status"] != string(c.status) || m["reason"] != c.reason
		}
	}
	return true
}
