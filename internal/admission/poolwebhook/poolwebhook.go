// Package poolwebhook is the NodeIPPool admission webhook the pool
// controller serves (docs/protocol.md, "Changing a range in place"). It lets an admin grow or trim a pool in
// place — move start or end, add or remove excludes — as long as no address
// in use leaves the range or is excluded, and refuses reservations that can
// never be handed out. Its warnings say what the change does to every
// holder, so `kubectl apply --dry-run=server` is a dry run of the change.
//
// The webhook only advises on a race it cannot see: a handler may take an
// address between the webhook's look and the write of the new spec. The
// pool controller's rebuild after the change is the guard: the range
// change makes the bitmap unreadable (its fingerprint names the old
// range), so nobody allocates until the controller has rebuilt the pool
// from its holders' records, and a holder whose address left the range gets
// another one (AddressOutsideRange).
package poolwebhook

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolchange"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// Path is where the pool controller serves the webhook; deploy/webhook
// names it.
const Path = "/validate-nodeippool"

// Validator admits NodeIPPool creations and updates. It is safe for
// concurrent use.
type Validator struct {
	// Reader reads enactments and pools from the API server: a change is
	// judged on what holds now, not on a cache that may lag.
	Reader client.Reader
	// Decoder decodes the request's objects.
	Decoder admission.Decoder
	// Signer tells the IPAddresses the provider made from any other; nil
	// counts every one (holder.List).
	Signer *capi.Signer
}

// Handle admits or refuses one request. Refusals are field errors
// (spec.range, spec.reservations[ip].ip) that name each holder, address and
// what to do; admitted changes of the range carry warnings with the plan.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var proposed ippoolv1.NodeIPPool
	if err := v.Decoder.Decode(req, &proposed); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the NodeIPPool: %w", err))
	}
	var stored *ippoolv1.NodeIPPool
	if req.Operation == admissionv1.Update {
		stored = &ippoolv1.NodeIPPool{}
		if err := v.Decoder.DecodeRaw(req.OldObject, stored); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the stored NodeIPPool: %w", err))
		}
	}
	rangeChanged := stored != nil && !reflect.DeepEqual(stored.Spec.Range, proposed.Spec.Range)
	if stored != nil && !rangeChanged && reflect.DeepEqual(stored.Spec.Reservations, proposed.Spec.Reservations) {
		return admission.Allowed("")
	}
	if _, err := poolstatus.Range(&proposed); err != nil {
		// The range cannot hand out addresses: the CRD's rules say why,
		// or the pool controller does (InvalidIPPool).
		return admission.Allowed("")
	}
	a, err := v.assess(ctx, &proposed, stored)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if errs := a.Refusals(rangeChanged); len(errs) > 0 {
		return invalid(proposed.Name, errs)
	}
	var warnings []string
	if rangeChanged || (stored == nil && len(a.Outcomes) > 0) {
		// A change of the range, or a pool created under a name that
		// enactments still record: say what it does to their addresses.
		warnings = a.Summary()
	}
	if stored == nil && len(a.Overlapping) > 0 {
		warnings = append(warnings, fmt.Sprintf("NodeIPPool %s overlaps NodeIPPool %s: the pool controller refuses the newer of two overlapping pools (OverlappingIPPool)",
			proposed.Name, strings.Join(a.Overlapping, ", ")))
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// assess reads what holds addresses of the pool and what other pools
// there are, and assesses the proposed pool.
func (v *Validator) assess(ctx context.Context, proposed, stored *ippoolv1.NodeIPPool) (*poolchange.Assessment, error) {
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := v.Reader.List(ctx, &enactments); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	var pools ippoolv1.NodeIPPoolList
	if err := v.Reader.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list NodeIPPools: %w", err)
	}
	holders, err := holder.List(ctx, v.Reader, enactments.Items, holder.Every(v.Signer))
	if err != nil {
		return nil, err
	}
	holdings := poolchange.Holdings(proposed.Name, stored, holders)
	return poolchange.Assess(proposed, stored, holdings, pools.Items)
}

// invalid refuses the request as the API server refuses an invalid
// object: "NodeIPPool "x" is invalid: spec.range: Forbidden: ...".
func invalid(name string, errs field.ErrorList) admission.Response {
	status := apierrors.NewInvalid(ippoolv1.GroupVersion.WithKind("NodeIPPool").GroupKind(), name, errs).Status()
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}
