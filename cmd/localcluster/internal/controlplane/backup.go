package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// backedUp are the kinds a backup holds, in the order a restore creates
// them: the pools before the policies that draw from them, Cluster API's
// IPAddresses before their claims (a claim restored first, and served
// before its IPAddress is back, would be given another address). The
// IPAM kinds are backed up at the first version served (the cluster may
// not have them). Enactments and NodeNetworkStates are not backed up: the
// handlers write them again, as a backup tool is told to leave them out.
var backedUp = []schema.GroupVersionKind{
	{Group: "nmstate.io", Version: "v1", Kind: "NodeIPPool"},
	{Group: "nmstate.io", Version: "v1", Kind: "PooledNodeNetworkConfigurationPolicy"},
	{Group: "nmstate.io", Version: "v1", Kind: "NodeNetworkConfigurationPolicy"},
	{Group: capi.Group, Version: "v1beta2", Kind: capi.AddressKind},
	{Group: capi.Group, Version: "v1beta1", Kind: capi.AddressKind},
	{Group: capi.Group, Version: "v1beta2", Kind: capi.ClaimKind},
	{Group: capi.Group, Version: "v1beta1", Kind: capi.ClaimKind},
}

// regenerated reports whether o is made again by the pooled policy it
// was generated from, and so left out of a backup: a policy labelled
// nmstate.io/pooled-policy (what Velero's --selector
// '!nmstate.io/pooled-policy' leaves out). An IPAddress, controlled by its
// claim, is backed up: it is the claim's record of its address.
func regenerated(o *unstructured.Unstructured) bool {
	_, generated := o.GetLabels()[ippoolv1.PooledPolicyLabel]
	return o.GetKind() == "NodeNetworkConfigurationPolicy" && generated
}

// Backup writes to w, as YAML documents, every object of the backed-up
// kinds, status included, as a backup tool (Velero) keeps them: the
// fields the API server sets (uid, resourceVersion, creation time, managed
// fields) left out. The policies generated from pooled policies are left
// out too (regenerated): their owner makes them again. A kind served at
// two versions is backed up once. It returns how many it wrote.
func Backup(ctx context.Context, s *state.Cluster, w io.Writer) (int, error) {
	k, err := s.Client()
	if err != nil {
		return 0, err
	}
	n := 0
	done := map[schema.GroupKind]bool{}
	for _, gvk := range backedUp {
		if done[gvk.GroupKind()] {
			continue
		}
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k.List(ctx, &list); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return n, fmt.Errorf("list %s: %w", gvk.Kind, err)
		}
		done[gvk.GroupKind()] = true
		for i := range list.Items {
			o := &list.Items[i]
			if regenerated(o) {
				continue
			}
			for _, f := range [][]string{{"metadata", "uid"}, {"metadata", "resourceVersion"}, {"metadata", "creationTimestamp"},
				{"metadata", "managedFields"}, {"metadata", "generation"}} {
				unstructured.RemoveNestedField(o.Object, f...)
			}
			raw, err := yaml.Marshal(o.Object)
			if err != nil {
				return n, err
			}
			if _, err := fmt.Fprintf(w, "---\n%s", raw); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// Objects are the objects of a backup file (Backup), read and checked
// before anything of the cluster is touched.
type Objects struct {
	byKind map[schema.GroupVersionKind][]*unstructured.Unstructured
	n      int
}

// Len is how many objects the backup holds.
func (b *Objects) Len() int { return b.n }

// ServedBy fails unless crds, the CRDs a restore installs again, serve
// every kind and version the backup holds: a restore empties etcd first,
// so an object it could not create must be found before.
func (b *Objects) ServedBy(crds CRDs) error {
	for _, gvk := range backedUp {
		if len(b.byKind[gvk]) == 0 || serves(crds, gvk) {
			continue
		}
		return fmt.Errorf("the backup holds %d %s of %s, which the cluster's CRDs do not serve (are Cluster API's CRDs "+
			"installed, localcluster up --crd?)", len(b.byKind[gvk]), gvk.Kind, gvk.GroupVersion())
	}
	return nil
}

// serves reports whether one of crds serves gvk.
func serves(crds CRDs, gvk schema.GroupVersionKind) bool {
	for _, crd := range crds {
		if crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == gvk.Version && v.Served {
				return true
			}
		}
	}
	return false
}

// ReadBackup reads the objects of a backup, and refuses one that holds
// anything but the backed-up kinds, an object without a name, or the same
// object twice: a restore empties etcd first, so a backup that cannot be
// restored whole must be refused before.
func ReadBackup(r io.Reader) (*Objects, error) {
	b := &Objects{byKind: map[schema.GroupVersionKind][]*unstructured.Unstructured{}}
	seen := map[string]bool{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 1; ; i++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if o.Object == nil {
			continue // only comments
		}
		gvk := o.GroupVersionKind()
		if !slices.Contains(backedUp, gvk) {
			return nil, fmt.Errorf("document %d is a %s of %s, %q, which a backup does not hold (it holds %s)",
				i, o.GetKind(), o.GetAPIVersion(), o.GetName(), kindsBackedUp())
		}
		if o.GetName() == "" {
			return nil, fmt.Errorf("document %d, a %s, has no metadata.name", i, gvk.Kind)
		}
		key := gvk.GroupKind().String() + "/" + o.GetNamespace() + "/" + o.GetName()
		if seen[key] {
			return nil, fmt.Errorf("document %d: %s %s is in the backup twice", i, gvk.Kind, objectName(o))
		}
		seen[key] = true
		b.byKind[gvk] = append(b.byKind[gvk], o)
		b.n++
	}
	return b, nil
}

func kindsBackedUp() string {
	names := make([]string, len(backedUp))
	for i, gvk := range backedUp {
		names[i] = gvk.Kind + " of " + gvk.GroupVersion().String()
	}
	return strings.Join(names, ", ")
}

// Restore creates the objects of a backup in the order of their kinds,
// and the namespaces they are in, as a restore tool does: without their
// owner references, which name the UIDs of owners that are gone (Velero
// drops them; the garbage collector would delete what they own). With
// status it then writes each one's status as it was backed up (Velero's
// restoreStatus); without, the objects come back with none (Velero's
// default). It returns how many it created.
func Restore(ctx context.Context, s *state.Cluster, b *Objects, withStatus bool) (int, error) {
	k, err := s.Client()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, gvk := range backedUp {
		for _, o := range b.byKind[gvk] {
			if err := restoreOne(ctx, k, o, withStatus); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func restoreOne(ctx context.Context, k client.Client, o *unstructured.Unstructured, withStatus bool) error {
	status, hasStatus := o.Object["status"]
	created := o.DeepCopy()
	delete(created.Object, "status")
	created.SetOwnerReferences(nil)
	if ns := o.GetNamespace(); ns != "" {
		err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s for %s %s: %w", ns, o.GetKind(), objectName(o), err)
		}
	}
	if err := k.Create(ctx, created); err != nil {
		return fmt.Errorf("restore %s %s: %w", o.GetKind(), objectName(o), err)
	}
	if !withStatus || !hasStatus {
		return nil
	}
	created.Object["status"] = status
	if err := k.Status().Update(ctx, created); err != nil {
		return fmt.Errorf("restore the status of %s %s: %w", o.GetKind(), objectName(o), err)
	}
	return nil
}

// objectName is o's namespace/name, or its name if it has no namespace.
func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
