package enactmentwebhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/scheme"
)

// TestHandle: a creation is refused only when its policy's name holds a dot
// and the policy does not exist; a failed read is an error, never an
// admission. The API server's side (which creations reach the webhook, the
// refusal a handler sees) is tested in deploy/admission_test.go.
func TestHandle(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	existing := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rack2.p"}}
	broken := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return errors.New("connection refused")
	}}
	for _, tt := range []struct {
		name    string
		op      admissionv1.Operation
		policy  string
		reads   interceptor.Funcs
		allowed bool
		code    int32
		says    string
	}{
		{"a policy without a dot", admissionv1.Create, "q", interceptor.Funcs{}, true, 200, ""},
		{"a dotted policy that exists", admissionv1.Create, "rack2.p", interceptor.Funcs{}, true, 200, ""},
		{"a dotted policy that does not exist", admissionv1.Create, "rack2.q", interceptor.Funcs{}, false, 403,
			"NodeNetworkConfigurationEnactment w1.rack2.q is for NodeNetworkConfigurationPolicy rack2.q, which does not exist"},
		{"an update is not judged", admissionv1.Update, "rack2.q", interceptor.Funcs{}, true, 200, ""},
		{"a failed read", admissionv1.Create, "rack2.p", broken, false, 500, "read NodeNetworkConfigurationPolicy rack2.p: connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(existing).WithInterceptorFuncs(tt.reads).Build()
			v := &Validator{Reader: c, Decoder: admission.NewDecoder(s)}
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{
				TypeMeta: metav1.TypeMeta{APIVersion: nncev1beta1.GroupVersion.String(), Kind: "NodeNetworkConfigurationEnactment"},
				ObjectMeta: metav1.ObjectMeta{Name: "w1." + tt.policy,
					Labels: map[string]string{shared.EnactmentNodeLabel: "w1", shared.EnactmentPolicyLabel: tt.policy}}}
			raw, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			resp := v.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: tt.op, Object: runtime.RawExtension{Raw: raw}}})
			if resp.Allowed != tt.allowed || resp.Result.Code != tt.code || !strings.Contains(resp.Result.Message, tt.says) {
				t.Errorf("allowed %v, code %d, message %q; want %v, %d, %q", resp.Allowed, resp.Result.Code, resp.Result.Message, tt.allowed, tt.code, tt.says)
			}
		})
	}
}
