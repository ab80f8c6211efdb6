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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
)

// TestHandle: a creation is refused only when its name holds more than
// one dot and its policy does not exist or does not select its node; a
// failed read is an error, never an admission. The API server's side
// (which creations reach the webhook, the refusal a handler sees) is
// tested in deploy/admission_test.go.
func TestHandle(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rack2.p"}},
		&nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rack2.s"},
			Spec: shared.NodeNetworkConfigurationPolicySpec{NodeSelector: map[string]string{"rack": "2"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2", Labels: map[string]string{"rack": "2"}}},
	}
	broken := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return errors.New("connection refused")
	}}
	for _, tt := range []struct {
		name         string
		op           admissionv1.Operation
		node, policy string
		reads        interceptor.Funcs
		allowed      bool
		code         int32
		says         string
	}{
		{"one dot: one reading", admissionv1.Create, "w1", "q", interceptor.Funcs{}, true, 200, ""},
		{"a policy that exists and selects every node", admissionv1.Create, "w1", "rack2.p", interceptor.Funcs{}, true, 200, ""},
		{"a policy that selects the node", admissionv1.Create, "w2", "rack2.s", interceptor.Funcs{}, true, 200, ""},
		{"a dotted policy that does not exist", admissionv1.Create, "w1", "rack2.q", interceptor.Funcs{}, false, 403,
			`NodeNetworkConfigurationEnactment w1.rack2.q is refused: NodeNetworkConfigurationPolicy "rack2.q" does not exist.`},
		{"a dotted node's policy that does not exist", admissionv1.Create, "w1.rack2", "q", interceptor.Funcs{}, false, 403,
			`NodeNetworkConfigurationEnactment w1.rack2.q is refused: NodeNetworkConfigurationPolicy "q" does not exist.`},
		{"a policy that does not select the node", admissionv1.Create, "w1", "rack2.s", interceptor.Funcs{}, false, 403,
			"the nodeSelector of NodeNetworkConfigurationPolicy rack2.s does not select node w1"},
		{"an update is not judged", admissionv1.Update, "w1", "rack2.q", interceptor.Funcs{}, true, 200, ""},
		{"a failed read", admissionv1.Create, "w1", "rack2.p", broken, false, 500, "read NodeNetworkConfigurationPolicy rack2.p: connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(tt.reads).Build()
			v := &Validator{Reader: c, Decoder: admission.NewDecoder(s)}
			e := &nncev1beta1.NodeNetworkConfigurationEnactment{
				TypeMeta: metav1.TypeMeta{APIVersion: nncev1beta1.GroupVersion.String(), Kind: "NodeNetworkConfigurationEnactment"},
				ObjectMeta: metav1.ObjectMeta{Name: tt.node + "." + tt.policy,
					Labels: map[string]string{shared.EnactmentNodeLabel: tt.node, shared.EnactmentPolicyLabel: tt.policy}}}
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
