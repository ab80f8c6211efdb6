// Package scheme builds the runtime.Scheme of every type the project's
// controllers and tools use. Each caller gets its own scheme; there is no
// process-wide one.
package scheme

import (
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// New returns a scheme with the Kubernetes built-in types, CRDs,
// NodeIPPools, enactments and policies.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		ippoolv1.AddToScheme,
		nncev1beta1.AddToScheme,
		nmstatev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
