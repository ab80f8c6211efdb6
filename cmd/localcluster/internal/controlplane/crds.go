package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
	"github.com/nmstate-ippool/nmstate-ippool/deploy"
)

// readCRD reads one CRD from a YAML file.
func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s is a %q, not a CustomResourceDefinition", path, crd.Kind)
	}
	return &crd, nil
}

// installCRDs creates the CRDs of deploy/crd, and those of up --crd, and
// waits until they serve.
func (c *cluster) installCRDs(ctx context.Context) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	crds, err := deploy.CRDs()
	if err != nil {
		return err
	}
	for _, path := range c.ExtraCRDs {
		crd, err := readCRD(path)
		if err != nil {
			return err
		}
		crds = append(crds, crd)
	}
	for _, crd := range crds {
		if err := k.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		ok := process.WaitFor(time.Minute, func() bool { return established(ctx, k, crd.Name) })
		if !ok {
			return fmt.Errorf("CRD %s is not established after a minute", crd.Name)
		}
	}
	return nil
}

func established(ctx context.Context, k client.Client, name string) bool {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := k.Get(ctx, types.NamespacedName{Name: name}, &crd); err != nil {
		return false
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
