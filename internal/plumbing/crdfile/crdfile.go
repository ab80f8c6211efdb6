// Package crdfile reads and writes a CustomResourceDefinition file the way
// controller-gen writes it (a leading "---", no status), for the
// generators of hack/ that complete a CRD controller-gen generated.
package crdfile

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Read reads the CRD of path, refusing a field the type does not know.
func Read(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &crd, nil
}

// Write writes crd to path as controller-gen does.
func Write(path string, crd *apiextensionsv1.CustomResourceDefinition) error {
	// Through a map, to leave out the empty status that controller-gen
	// does not write either.
	typed, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(typed, &doc); err != nil {
		return err
	}
	delete(doc, "status")
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}
