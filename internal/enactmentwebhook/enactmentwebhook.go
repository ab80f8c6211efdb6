// Package enactmentwebhook is the admission webhook, served by the pool
// controller, that keeps a node from taking the name another node's
// enactment needs.
//
// An enactment is named <node>.<policy> after its two labels
// (kubernetes-nmstate's naming, kept for parity). Node and policy names may
// hold dots, so one name can read two ways: w1.rack2.q is node w1's
// enactment of policy rack2.q and node w1.rack2's of policy q. The
// admission policy of deploy/admission holds a handler to enactments of
// its own node named after their labels, but it cannot read whether a
// policy exists: without this webhook node w1 could create w1.rack2.q for a
// policy rack2.q that does not exist, and node w1.rack2 could then neither
// create nor change its own enactment of policy q.
//
// The webhook admits the creation of an enactment whose policy label holds
// a dot only while that NodeNetworkConfigurationPolicy exists, read from
// the API server rather than a cache that may lag. A name that an existing
// policy and an existing node both need is a real collision of the naming;
// the first creation wins. The webhook configuration (deploy/webhook) sends
// only those creations, so a pool controller that is down delays only
// enactments of policies with dots in their names.
package enactmentwebhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// Path is where the pool controller serves the webhook; deploy/webhook
// names it.
const Path = "/validate-enactment"

// Validator admits enactment creations. It is safe for concurrent use.
type Validator struct {
	// Reader reads policies from the API server.
	Reader client.Reader
	// Decoder decodes the request's object.
	Decoder admission.Decoder
}

// Handle admits a creation unless its policy label holds a dot and names
// no existing policy; it refuses with a message that names the
// enactment and the policy, and says why. A failed
// read is an error (the API server then applies the configuration's
// failure policy).
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := v.Decoder.Decode(req, &e); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the enactment: %w", err))
	}
	policy := e.Labels[shared.EnactmentPolicyLabel]
	if !strings.Contains(policy, ".") {
		return admission.Allowed("")
	}
	err := v.Reader.Get(ctx, client.ObjectKey{Name: policy}, &nmstatev1.NodeNetworkConfigurationPolicy{})
	switch {
	case err == nil:
		return admission.Allowed("")
	case apierrors.IsNotFound(err):
		return admission.Denied(Refusal(e.Name, policy))
	default:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("read NodeNetworkConfigurationPolicy %s: %w", policy, err))
	}
}

// Refusal is the message of a refused creation of enactment name for a
// policy that does not exist.
func Refusal(name, policy string) string {
	return fmt.Sprintf("NodeNetworkConfigurationEnactment %s is for NodeNetworkConfigurationPolicy %s, which does not exist: "+
		"an enactment of a policy whose name holds a dot is made only while the policy exists, since its name <node>.<policy> "+
		"may also be another node's enactment of another policy", name, policy)
}
