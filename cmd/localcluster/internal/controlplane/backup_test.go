package controlplane

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestReadBackup: a backup is read whole before a restore empties etcd;
// one that could not be restored whole is refused, saying why.
func TestReadBackup(t *testing.T) {
	const pool = "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: p}\nspec: {range: {cidr: 10.0.0.0/24}}\n"
	const policy = "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata: {name: q}\n"
	claim := func(ns string) string {
		return "apiVersion: ipam.cluster.x-k8s.io/v1beta2\nkind: IPAddressClaim\nmetadata: {name: m1, namespace: " + ns + "}\n"
	}
	const address = "apiVersion: ipam.cluster.x-k8s.io/v1beta1\nkind: IPAddress\nmetadata: {name: m1, namespace: a}\n"
	for _, tc := range []struct {
		name, backup string
		n            int
		err          string
	}{
		{name: "pools and policies, comments and empty documents", backup: "# a backup\n---\n" + pool + "---\n---\n" + policy, n: 2},
		{name: "nothing", backup: "", n: 0},
		{name: "another kind", backup: pool + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
			err: `document 2 is a ConfigMap of v1, "c", which a backup does not hold`},
		{name: "another version", backup: strings.Replace(pool, "nmstate.io/v1", "nmstate.io/v1beta1", 1),
			err: `document 1 is a NodeIPPool of nmstate.io/v1beta1, "p"`},
		{name: "no name", backup: "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nspec: {}\n", err: "document 1, a NodeIPPool, has no metadata.name"},
		{name: "twice", backup: pool + "---\n" + policy + "---\n" + pool, err: "document 3: NodeIPPool p is in the backup twice"},
		{name: "claims of one name in two namespaces, and their IPAddresses", backup: claim("a") + "---\n" + claim("b") + "---\n" + address, n: 3},
		{name: "a claim twice", backup: claim("a") + "---\n" + claim("a"), err: "document 2: IPAddressClaim a/m1 is in the backup twice"},
		{name: "a claim twice, at two versions", backup: claim("a") + "---\n" + strings.Replace(claim("a"), "v1beta2", "v1beta1", 1),
			err: "document 2: IPAddressClaim a/m1 is in the backup twice"},
		{name: "not YAML", backup: pool + "---\n{nope\n", err: "document 2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ReadBackup(strings.NewReader(tc.backup))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ReadBackup: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Len() != tc.n {
				t.Errorf("%d objects, want %d", b.Len(), tc.n)
			}
		})
	}
}

// TestServedBy: a backup that holds a kind or version the cluster's CRDs
// do not serve is refused before a restore empties anything.
func TestServedBy(t *testing.T) {
	crd := func(group, kind string, versions ...string) *apiextensionsv1.CustomResourceDefinition {
		c := &apiextensionsv1.CustomResourceDefinition{}
		c.Spec.Group, c.Spec.Names.Kind = group, kind
		for _, v := range versions {
			c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true})
		}
		return c
	}
	ours := CRDs{crd("nmstate.io", "NodeIPPool", "v1")}
	withIPAM := append(CRDs{crd("ipam.cluster.x-k8s.io", "IPAddressClaim", "v1beta1")}, ours...)
	const claim = "apiVersion: ipam.cluster.x-k8s.io/v1beta2\nkind: IPAddressClaim\nmetadata: {name: m1, namespace: a}\n"
	const pool = "apiVersion: nmstate.io/v1\nkind: NodeIPPool\nmetadata: {name: p}\n"
	for _, tc := range []struct {
		name, backup string
		crds         CRDs
		err          string
	}{
		{name: "pools, served", backup: pool, crds: ours},
		{name: "a claim, no IPAM CRDs", backup: pool + "---\n" + claim, crds: ours,
			err: "the backup holds 1 IPAddressClaim of ipam.cluster.x-k8s.io/v1beta2, which the cluster's CRDs do not serve"},
		{name: "a claim at a version not served", backup: claim, crds: withIPAM, err: "IPAddressClaim of ipam.cluster.x-k8s.io/v1beta2"},
		{name: "a claim, served", backup: strings.Replace(claim, "v1beta2", "v1beta1", 1), crds: withIPAM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ReadBackup(strings.NewReader(tc.backup))
			if err != nil {
				t.Fatal(err)
			}
			err = b.ServedBy(tc.crds)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("ServedBy: %v, want %q", err, tc.err)
			}
		})
	}
}
