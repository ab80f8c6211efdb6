// Package enactmentwebhook is the admission webhook, served by the pool
// controller, that keeps a node from taking the name another node's
// enactment needs.
//
// An enactment is named <node>.<policy> after its two labels
// (kubernetes-nmstate's naming, kept for parity). Node and policy names may
// hold dots, so a name with two dots or more reads several ways: w1.rack2.q
// is node w1's enactment of policy rack2.q and node w1.rack2's of policy q.
// The admission policy of deploy/admission holds a handler to enactments
// of its own node named after their labels, but it cannot read whether a
// policy exists or selects the node: without this webhook node w1 could
// create w1.rack2.q for a policy rack2.q that does not exist (or does not
// select w1), and node w1.rack2 could then neither create nor change its
// own enactment of policy q — or the other way round.
//
// The webhook admits the creation of an enactment whose name holds more
// than one dot only while the policy its label names exists and its
// nodeSelector selects the node its label names, read from the API server
// rather than a cache that may lag. A name that two such (node, policy)
// pairs both need is a real collision of the naming; the first creation
// wins. The webhook configuration (deploy/webhook) sends only those
// creations, so a pool controller that is down delays only them.
package enactmentwebhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
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

// Handle admits a creation unless its name holds more than one dot and
// its policy does not exist or does not select its node; it refuses with a
// message that names the enactment, the policy and the node, and says why.
// A failed read is an error (the API server then applies the
// configuration's failure policy).
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var e nncev1beta1.NodeNetworkConfigurationEnactment
	if err := v.Decoder.Decode(req, &e); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the enactment: %w", err))
	}
	if strings.Count(e.Name, ".") < 2 {
		return admission.Allowed("")
	}
	why, err := v.unselected(ctx, e.Labels[shared.EnactmentNodeLabel], e.Labels[shared.EnactmentPolicyLabel])
	switch {
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	case why != "":
		return admission.Denied(Refusal(e.Name, why))
	}
	return admission.Allowed("")
}

// unselected says why policy is not one that node enacts — it does not
// exist, or its nodeSelector does not select the node — or "" when it is.
func (v *Validator) unselected(ctx context.Context, node, policy string) (string, error) {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	err := v.Reader.Get(ctx, client.ObjectKey{Name: policy}, &p)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("NodeNetworkConfigurationPolicy %q does not exist", policy), nil
	case err != nil:
		return "", fmt.Errorf("read NodeNetworkConfigurationPolicy %s: %w", policy, err)
	case len(p.Spec.NodeSelector) == 0:
		return "", nil
	}
	var n corev1.Node
	err = v.Reader.Get(ctx, client.ObjectKey{Name: node}, &n)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("node %q does not exist", node), nil
	case err != nil:
		return "", fmt.Errorf("read Node %s: %w", node, err)
	case !labels.SelectorFromSet(p.Spec.NodeSelector).Matches(labels.Set(n.Labels)):
		return fmt.Sprintf("the nodeSelector of NodeNetworkConfigurationPolicy %s does not select node %s", policy, node), nil
	}
	return "", nil
}

// Refusal is the message of a refused creation of enactment name, and why
// its node does not enact its policy.
func Refusal(name, why string) string {
	return fmt.Sprintf("NodeNetworkConfigurationEnactment %s is refused: %s. An enactment whose name holds more than one dot "+
		"is made only for an existing policy that selects its node, since its name <node>.<policy> reads several ways "+
		"and may be another node's enactment of another policy", name, why)
}
