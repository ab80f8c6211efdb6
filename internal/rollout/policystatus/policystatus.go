// Package policystatus is what every writer of a policy's status shares: how
// the enactments of its nodes sum up into kubernetes-nmstate's conditions
// ("3/3 nodes successfully configured") and how many nodes may apply at
// once (maxUnavailable). The policy controller uses it for NNCPs, the
// pooled-policy controller for the NNCPs it generates, one per node.
// It is pure: no API calls.
package policystatus

import (
	"fmt"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/conditions"
)

// DefaultMaxUnavailable is kubernetes-nmstate's default.
var DefaultMaxUnavailable = intstr.FromString("50%")

// State is where one node stands with a policy's generation.
type State int

const (
	// Progressing means the node has not finished the generation (no
	// enactment yet, one of an older generation, Pending or Progressing).
	Progressing State = iota
	// Available means the node applied it.
	Available
	// Failing means the node gave up on it, or is retrying.
	Failing
	// Aborted means the rollout was aborted before the node applied it.
	Aborted
)

// StateOf says where the node of enactment e stands with generation; a nil
// enactment, or one still Progressing (retrying included), is Progressing.
func StateOf(e *nncev1beta1.NodeNetworkConfigurationEnactment, generation int64) State {
	if e == nil {
		return Progressing
	}
	if slot := e.Status.Slot; slot != nil && slot.Aborted != nil && slot.Aborted.PolicyGeneration == generation {
		// The policy controller refused it; its handler has not shown
		// that yet (a served new enactment has not written its generation).
		return Aborted
	}
	if e.Status.PolicyGeneration != generation {
		return Progressing
	}
	if c := e.Status.Conditions.Find(shared.NodeNetworkConfigurationEnactmentConditionProgressing); c != nil && c.Status == corev1.ConditionTrue {
		// kubernetes-nmstate's handler between two attempts: Failing and
		// Progressing both True, reason Retrying. Not done yet.
		return Progressing
	}
	switch conditions.TrueType(e.Status.Conditions) {
	case shared.NodeNetworkConfigurationEnactmentConditionAvailable:
		return Available
	case shared.NodeNetworkConfigurationEnactmentConditionFailing:
		return Failing
	case shared.NodeNetworkConfigurationEnactmentConditionAborted:
		return Aborted
	}
	return Progressing
}

// Summary counts the matching nodes of a policy by State. NotReady counts
// those of them that are not Ready and have no enactment at the policy's
// generation: kubernetes-nmstate ignores them ("ignored due to NotReady
// state"), and they are counted in no State.
type Summary struct {
	Matching, Available, Failing, Aborted, Progressing, NotReady int
}

// Add counts one node in state s.
func (s *Summary) Add(st State) {
	switch st {
	case Available:
		s.Available++
	case Failing:
		s.Failing++
	case Aborted:
		s.Aborted++
	default:
		s.Progressing++
	}
}

// Summarize counts enactments, which must be those of matching nodes, at
// generation.
func Summarize(matching int, generation int64, enactments []*nncev1beta1.NodeNetworkConfigurationEnactment) Summary {
	s := Summary{Matching: matching}
	for _, e := range enactments {
		s.Add(StateOf(e, generation))
	}
	return s
}

// ignored ends a message as kubernetes-nmstate does when nodes are not
// Ready.
func (s Summary) ignored() string {
	if s.NotReady == 0 {
		return ""
	}
	return fmt.Sprintf(", %d nodes ignored due to NotReady state", s.NotReady)
}

// Ignored is a policy's Ignored condition type.
const Ignored = shared.ConditionType(ippoolv1.PolicyConditionIgnored)

// Conditions computes a policy's Available, Degraded, Progressing and
// Ignored conditions from a summary, as kubernetes-nmstate reports them.
// A policy that selects no node is Ignored, not Available: nothing was
// configured.
func Conditions(old shared.ConditionList, s Summary, now time.Time) shared.ConditionList {
	switch {
	case s.Matching == 0:
		return List(old, Ignored, shared.NodeNetworkConfigurationPolicyConditionConfigurationNoMatchingNode,
			"Policy does not match any node", now)
	case s.Failing > 0 || s.Aborted > 0:
		msg := fmt.Sprintf("%d/%d nodes failed to configure", s.Failing, s.Matching)
		if s.Aborted > 0 {
			msg += fmt.Sprintf(", %d aborted", s.Aborted)
		}
		return List(old, shared.NodeNetworkConfigurationPolicyConditionDegraded, shared.NodeNetworkConfigurationPolicyConditionFailedToConfigure, msg, now)
	case s.Available >= s.Matching-s.NotReady:
		return List(old, shared.NodeNetworkConfigurationPolicyConditionAvailable, shared.NodeNetworkConfigurationPolicyConditionSuccessfullyConfigured,
			fmt.Sprintf("%d/%d nodes successfully configured%s", s.Available, s.Matching, s.ignored()), now)
	default:
		return List(old, shared.NodeNetworkConfigurationPolicyConditionProgressing, shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing,
			fmt.Sprintf("Policy is progressing %d/%d nodes finished%s", s.Available, s.Matching-s.NotReady, s.ignored()), now)
	}
}

// List returns a policy's conditions with trueType True, with reason and
// message, merged with old, and the others as kubernetes-nmstate writes
// them: False with the same reason and no message, but Available and
// Degraded Unknown while the policy progresses, and Progressing's reason
// ConfigurationProgressing once it is Degraded.
func List(old shared.ConditionList, trueType shared.ConditionType, r shared.ConditionReason, msg string, now time.Time) shared.ConditionList {
	const (
		avail = shared.NodeNetworkConfigurationPolicyConditionAvailable
		degr  = shared.NodeNetworkConfigurationPolicyConditionDegraded
		prog  = shared.NodeNetworkConfigurationPolicyConditionProgressing
	)
	out := make(shared.ConditionList, 0, 4)
	for _, t := range []shared.ConditionType{avail, degr, prog, Ignored} {
		want := shared.Condition{Type: t, Status: corev1.ConditionFalse, Reason: r}
		switch {
		case t == trueType:
			want.Status, want.Message = corev1.ConditionTrue, msg
		case trueType == prog && (t == avail || t == degr):
			want.Status = corev1.ConditionUnknown
		case trueType == degr && t == prog:
			want.Reason = shared.NodeNetworkConfigurationPolicyConditionConfigurationProgressing
		}
		out = append(out, conditions.Merge(old.Find(t), want, now))
	}
	return out
}

// MaxUnavailable returns how many of matching nodes may apply at once:
// the policy's maxUnavailable (or DefaultMaxUnavailable) of them, rounded
// up, and at least one.
func MaxUnavailable(spec *intstr.IntOrString, matching int) (int, error) {
	v := DefaultMaxUnavailable
	if spec != nil {
		v = *spec
	}
	limit, err := intstr.GetScaledValueFromIntOrPercent(&v, matching, true)
	if err != nil {
		return 0, fmt.Errorf("maxUnavailable %q: %w", v.String(), err)
	}
	return max(limit, 1), nil
}
