package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/rollout/probe"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// render reads the node's current state and renders the policy with the
// allocated addresses.
func (r *Reconciler) render(ctx context.Context, s *scope, addresses map[string]capture.Address) (capture.Output, error) {
	out, _, err := r.renderOn(ctx, s, addresses)
	return out, err
}

// renderOn is render, which also returns the current state it rendered
// on.
func (r *Reconciler) renderOn(ctx context.Context, s *scope, addresses map[string]capture.Address) (capture.Output, []byte, error) {
	current, err := r.State.Show(ctx)
	if err != nil {
		return capture.Output{}, nil, fmt.Errorf("read the current state: %w", err)
	}
	out, err := capture.Render(capture.Input{
		DesiredState: s.policy.Spec.DesiredState.Raw,
		Captures:     s.captures,
		Allocated:    addresses,
		CurrentState: current,
	})
	return out, current, err
}

// toApply is the rendered desired state as applied: with each of the
// node's recorded addresses taken off any interface other than the one
// the policy now puts it on (netstate.OnlyWhereDesired). nmstate leaves
// the interfaces a state does not name as they are, so a policy edited
// to put its address on another interface would leave it on the old one
// too. The enactment records the rendered state, not this: once the
// address is off the old interface, the same policy renders the same.
// What it takes off, and what it cannot, is in the moves returned.
func toApply(rendered, current []byte, addresses map[string]capture.Address) ([]byte, netstate.Moves, error) {
	ips := make([]netip.Addr, 0, len(addresses))
	for _, a := range addresses {
		ips = append(ips, a.IP)
	}
	desired, moves, err := netstate.OnlyWhereDesired(rendered, current, ips)
	if err != nil {
		return nil, moves, fmt.Errorf("take the node's pool addresses off the interfaces the policy no longer puts them on: %w", err)
	}
	return desired, moves, nil
}

// reportMoves says, once the apply succeeded, which addresses it took off
// other interfaces (a log line each), and raises a Warning Event on the
// enactment for each address that stays on an interface the policy no
// longer puts it on: on a family configured by DHCP or autoconf there,
// which nmstate cannot take one address off.
func (r *Reconciler) reportMoves(ctx context.Context, e *nncev1beta1.NodeNetworkConfigurationEnactment, moves netstate.Moves) {
	for _, ip := range slices.SortedFunc(maps.Keys(moves.Off), netip.Addr.Compare) {
		ctrl.LoggerFrom(ctx).Info("took an address off an interface the policy no longer puts it on", "ip", ip.String(), "interface", moves.Off[ip])
	}
	for _, ip := range slices.SortedFunc(maps.Keys(moves.Stays), netip.Addr.Compare) {
		r.Recorder.Eventf(e, nil, corev1.EventTypeWarning, ippoolv1.ReasonAddressNotMoved, "Apply",
			"%s is on node %s's interface %s too, which the policy no longer puts it on; it could not be taken off, because that interface's %s is configured by DHCP or autoconf: take it off by hand (one address, one NIC)",
			ip, r.NodeName, moves.Stays[ip], netstate.Family(ip))
	}
}

func addressStates(addresses map[string]capture.Address) map[string][]byte {
	states := map[string][]byte{}
	for name, a := range addresses {
		states[name] = a.State()
	}
	return states
}

// alreadyApplied reports whether the enactment already shows this rendering of
// this policy generation as applied, with the same record: then there is
// nothing to write and nothing to apply.
func alreadyApplied(e *nncev1beta1.NodeNetworkConfigurationEnactment, policy *nmstatev1.NodeNetworkConfigurationPolicy,
	rendered capture.Output, captures capture.Captures, addresses map[string]capture.Address) bool {
	if e.Status.PolicyGeneration != policy.Generation ||
		trueCondition(e) != shared.NodeNetworkConfigurationEnactmentConditionAvailable ||
		!sameState(e.Status.DesiredState.Raw, rendered.DesiredState) {
		return false
	}
	want := e.DeepCopy()
	writeRecord(want, captures, addresses, rendered.CapturedStates, shared.NodeNetworkConfigurationEnactmentMetaInfo{})
	return maps.EqualFunc(want.Status.IPPool, e.Status.IPPool, func(a, b ippoolv1.PoolAllocation) bool {
		return slices.Equal(a.Allocated, b.Allocated)
	}) && maps.EqualFunc(want.Status.CapturedStates, e.Status.CapturedStates,
		func(a, b shared.NodeNetworkConfigurationEnactmentCapturedState) bool {
			return sameState(a.State.Raw, b.State.Raw)
		})
}

// sameState compares two YAML or JSON documents by content.
func sameState(a, b []byte) bool {
	ja, errA := yaml.YAMLToJSON(a)
	jb, errB := yaml.YAMLToJSON(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// applyGranted applies the policy once the policy controller granted the
// slot, and gives the slot back with the outcome. Under NetworkLock it
// confirms on the API server that the enactment still asks for this
// apply: an address whose record was removed meanwhile (a reset, a fence)
// is never put on the network, and the state reporter never publishes a
// state from the middle of an apply. The state applied is rendered here,
// from the policy and the enactment's record, on the current state the
// apply starts from; status.desiredState is never applied as stored: it
// is what the node applied, not an instruction to it.
func (r *Reconciler) applyGranted(ctx context.Context, name string) (ctrl.Result, error) {
	if r.NetworkLock != nil {
		r.NetworkLock.Lock()
		defer r.NetworkLock.Unlock()
	}
	s, err := r.confirmed(ctx, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.decide(r.Clock.Now(), r.timing()) != stepApply {
		ctrl.LoggerFrom(ctx).V(1).Info("the enactment changed before the apply; deciding again")
		return ctrl.Result{RequeueAfter: cacheLag}, nil
	}
	if showsQueued(s.enactment) {
		// Granted after a wait in the queue: it applies now, and says so
		// (kubernetes-nmstate's words) rather than that it waits.
		if err := r.writeEnactment(ctx, s.enactment, progressing("Applying desired state")); err != nil {
			return ctrl.Result{}, err
		}
	}
	addresses := recordedAddresses(s.enactment, s.captures)
	rendered, current, err := r.renderOn(ctx, s, addresses)
	var desired []byte
	var moves netstate.Moves
	if err == nil {
		desired, moves, err = toApply(rendered.DesiredState, current, addresses)
	}
	if err != nil {
		return r.conclude(ctx, s, r.configureFailed(s, err.Error()))
	}
	writeRecord(s.enactment, s.captures, addresses, rendered.CapturedStates, r.meta())
	s.enactment.Status.DesiredState = shared.NewState(string(rendered.DesiredState))
	applyErr := r.applyProbed(ctx, desired)
	if r.StateChanged != nil {
		r.StateChanged()
	}
	if applyErr != nil {
		ctrl.LoggerFrom(ctx).Info("applying the desired state failed", "error", applyErr.Error())
		return r.conclude(ctx, s, r.configureFailed(s,
			fmt.Sprintf("error reconciling NodeNetworkConfigurationPolicy on node %s: %v", r.NodeName, applyErr)))
	}
	r.reportMoves(ctx, s.enactment, moves)
	ctrl.LoggerFrom(ctx).Info("applied desired state", "ippool", s.enactment.Status.IPPool)
	return r.conclude(ctx, s, available(appliedMessage(s.enactment)))
}

// appliedMessage is the Available message of an applied enactment:
// kubernetes-nmstate's, and, for each pool that could not adopt what the
// node carried, which addresses the pool's replaced and why.
func appliedMessage(e *nncev1beta1.NodeNetworkConfigurationEnactment) string {
	msg := []string{"successfully reconciled"}
	for _, pool := range slices.Sorted(maps.Keys(e.Status.IPPool)) {
		if n := e.Status.IPPool[pool].NotAdopted; len(n) > 0 {
			msg = append(msg, fmt.Sprintf("NodeIPPool %s could not adopt what the node carried: %s; its address replaced it", pool, strings.Join(n, "; ")))
		}
	}
	return strings.Join(msg, "; ")
}

// applyProbed applies desired as kubernetes-nmstate does: it rolls back a
// checkpoint a crashed apply may have left, notes which conditional
// probes pass, applies under a checkpoint, and runs the probes. If they
// pass it commits; if one fails it rolls back and probes again, and the
// error names the probe and what it saw, and how the node fared after the
// rollback.
func (r *Reconciler) applyProbed(ctx context.Context, desired []byte) error {
	log := ctrl.LoggerFrom(ctx)
	if err := r.State.Rollback(ctx); err == nil {
		log.Info("rolled back a checkpoint left by an earlier apply")
	}
	probes := r.Probes.Before(ctx)
	if err := r.State.Apply(ctx, desired); err != nil {
		return err
	}
	probeErr := r.Probes.After(ctx, probes)
	if probeErr == nil {
		if err := r.State.Commit(ctx); err != nil {
			return errors.Join(err, rollbackError(r.State.Rollback(ctx)))
		}
		log.V(1).Info("probes passed; committed", "probes", probe.Names(probes))
		return nil
	}
	log.Info("a probe failed after the apply; rolling back", "error", probeErr.Error())
	if err := r.State.Rollback(ctx); err != nil {
		return fmt.Errorf("%w; rolling back failed too: %w", probeErr, err)
	}
	if err := r.Probes.After(ctx, probes); err != nil {
		return fmt.Errorf("rolled back: %w; after the rollback %w", probeErr, err)
	}
	return fmt.Errorf("rolled back: %w", probeErr)
}

// applyUnprobed applies desired and commits it at once, without probes:
// for a change that must hold even if the node cannot reach what the
// probes check.
func (r *Reconciler) applyUnprobed(ctx context.Context, desired []byte) error {
	if err := r.State.Rollback(ctx); err == nil {
		ctrl.LoggerFrom(ctx).Info("rolled back a checkpoint left by an earlier apply")
	}
	if err := r.State.Apply(ctx, desired); err != nil {
		return err
	}
	if err := r.State.Commit(ctx); err != nil {
		return errors.Join(err, rollbackError(r.State.Rollback(ctx)))
	}
	return nil
}

// rollbackError words a failed rollback after a failed commit.
func rollbackError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rolling back failed too: %w", err)
}
