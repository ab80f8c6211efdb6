package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
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

// crdsOf reads the CRDs of a directory of CRD files, as deploy/crd
// holds them (a kustomization.yaml beside them is not one).
func crdsOf(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		crd, err := readCRD(f)
		if err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRD in %s", dir)
	}
	return crds, nil
}

// installCRDs creates, or updates to what it installs, the CRDs the
// cluster installs (crds), and waits until they serve.
func (c *cluster) installCRDs(ctx context.Context) error {
	crds, err := c.crds()
	if err != nil {
		return err
	}
	return c.install(ctx, crds)
}

// crds reads the CRDs the cluster installs: those of deploy/crd (those of
// c.CRDDir instead, when set: another version's), and those of up --crd.
func (c *cluster) crds() (CRDs, error) {
	crds, err := deploy.CRDs()
	if c.CRDDir != "" {
		crds, err = crdsOf(c.CRDDir)
	}
	if err != nil {
		return nil, err
	}
	for _, path := range c.ExtraCRDs {
		crd, err := readCRD(path)
		if err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// install creates, or updates to theirs, the CRDs crds, and waits until
// they serve.
func (c *cluster) install(ctx context.Context, crds CRDs) error {
	k, err := c.Client()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := apply(ctx, k, crd); err != nil {
			return err
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

// apply creates crd, or replaces the spec of the CRD of its name with its
// own, as kubectl apply does for an upgrade.
func apply(ctx context.Context, k client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	err := k.Create(ctx, crd)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		return nil
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var live apiextensionsv1.CustomResourceDefinition
		if err := k.Get(ctx, client.ObjectKeyFromObject(crd), &live); err != nil {
			return err
		}
		live.Spec = crd.Spec
		live.Labels, live.Annotations = crd.Labels, crd.Annotations
		return k.Update(ctx, &live)
	})
	if err != nil {
		return fmt.Errorf("update CRD %s: %w", crd.Name, err)
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
