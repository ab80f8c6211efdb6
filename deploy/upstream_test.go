package deploy_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// peerTarball returns the kubernetes-nmstate source kept beside the
// project (../shared/peers), or "" when this checkout has none.
func peerTarball(t *testing.T) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(envtest.RepoRoot(), "..", "shared", "peers", "kubernetes-nmstate-*.tar.gz"))
	if err != nil || len(matches) == 0 {
		return ""
	}
	return matches[0]
}

// upstreamTypes parses the Go files of kubernetes-nmstate's api/shared
// package from its source tarball and returns its struct types by name.
func upstreamTypes(t *testing.T, tarball string) map[string]*ast.StructType {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	fset := token.NewFileSet()
	types := map[string]*ast.StructType{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dir, name := path.Split(h.Name)
		if !strings.HasSuffix(dir, "/api/shared/") || !strings.HasSuffix(name, "_types.go") {
			continue
		}
		src, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, h.Name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					types[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	if len(types) == 0 {
		t.Fatalf("%s holds no api/shared/*_types.go", tarball)
	}
	return types
}

// missingFields returns the JSON paths of the fields of the upstream
// struct typeName (its inline members included, nested structs of the
// package followed) that schema does not carry, under prefix.
func missingFields(types map[string]*ast.StructType, typeName string, schema apiextensionsv1.JSONSchemaProps, prefix string) []string {
	st, ok := types[typeName]
	if !ok || schema.XPreserveUnknownFields != nil && *schema.XPreserveUnknownFields {
		return nil
	}
	var missing []string
	for _, field := range st.Fields.List {
		tag := ""
		if field.Tag != nil {
			tag = reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("json")
		}
		name, _, _ := strings.Cut(tag, ",")
		inner := innerType(field.Type)
		if name == "" && len(field.Names) == 0 { // inline
			missing = append(missing, missingFields(types, inner, schema, prefix)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		sub, ok := schema.Properties[name]
		if !ok {
			missing = append(missing, prefix+"."+name)
			continue
		}
		switch {
		case sub.AdditionalProperties != nil && sub.AdditionalProperties.Schema != nil:
			sub = *sub.AdditionalProperties.Schema
		case sub.Items != nil && sub.Items.Schema != nil:
			sub = *sub.Items.Schema
		}
		missing = append(missing, missingFields(types, inner, sub, prefix+"."+name)...)
	}
	return missing
}

// innerType names the type a field's type holds: T of T, *T, []T and
// map[K]T; "" for any other.
func innerType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return innerType(e.X)
	case *ast.ArrayType:
		return innerType(e.Elt)
	case *ast.MapType:
		return innerType(e.Value)
	}
	return ""
}

// TestCRDsCarryUpstreamFields: every field today's kubernetes-nmstate
// handler writes into an NNCP, NNCE or NNS (its api/shared types, from the
// peer source in ../shared/peers) is in the schema of every version of the
// CRD this project ships, so that the API server prunes none of them:
// either handler may run before or after the other.
func TestCRDsCarryUpstreamFields(t *testing.T) {
	tarball := peerTarball(t)
	if tarball == "" {
		t.Skip("no kubernetes-nmstate source in ../shared/peers: the upstream types cannot be read")
	}
	types := upstreamTypes(t, tarball)
	for _, tt := range []struct {
		crd   string
		parts map[string]string // schema property -> upstream type
	}{
		{"nmstate.io_nodenetworkconfigurationpolicies.yaml", map[string]string{
			"spec": "NodeNetworkConfigurationPolicySpec", "status": "NodeNetworkConfigurationPolicyStatus"}},
		{"nmstate.io_nodenetworkconfigurationenactments.yaml", map[string]string{
			"status": "NodeNetworkConfigurationEnactmentStatus"}},
		{"nmstate.io_nodenetworkstates.yaml", map[string]string{"status": "NodeNetworkStateStatus"}},
	} {
		raw, err := os.ReadFile(filepath.Join(envtest.RepoRoot(), "deploy", "crd", tt.crd))
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			root := v.Schema.OpenAPIV3Schema.Properties
			for part, typeName := range tt.parts {
				if _, ok := types[typeName]; !ok {
					t.Errorf("upstream has no type %s any more: update this test", typeName)
					continue
				}
				for _, m := range missingFields(types, typeName, root[part], part) {
					t.Errorf("%s %s prunes %s, which kubernetes-nmstate's handler writes (%s)", crd.Spec.Names.Kind, v.Name, m, typeName)
				}
			}
		}
	}
}
