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

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
)

// backedUp are the kinds a backup holds, in the order a restore creates
// them: the pools before the policies that draw from them. Enactments and
// NodeNetworkStates are not backed up: the handlers write them again, as
// a backup tool is told to leave them out.
var backedUp = []schema.GroupVersionKind{
	{Group: "nmstate.io", Version: "v1", Kind: "NodeIPPool"},
	{Group: "nmstate.io", Version: "v1", Kind: "PooledNodeNetworkConfigurationPolicy"},
	{Group: "nmstate.io", Version: "v1", Kind: "NodeNetworkConfigurationPolicy"},
}

// Backup writes to w, as YAML documents, every object of the backed-up
// kinds, status included, as a backup tool (Velero) keeps them: the
// fields the API server sets (uid, resourceVersion, creation time, managed
// fields) left out. Objects another object controls (the plain policies
// companion mode generates) are left out too: their owner makes them
// again. It returns how many it wrote.
func Backup(ctx context.Context, s *state.Cluster, w io.Writer) (int, error) {
	k, err := s.Client()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, gvk := range backedUp {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := k.List(ctx, &list); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return n, fmt.Errorf("list %s: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if metav1.GetControllerOf(o) != nil {
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
		key := gvk.Kind + "/" + o.GetName()
		if seen[key] {
			return nil, fmt.Errorf("document %d: %s %s is in the backup twice", i, gvk.Kind, o.GetName())
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
// as a restore tool does; with status it then writes each one's status
// as it was backed up (Velero's restoreStatus), without it the objects
// come back with none (Velero's default). It returns how many it created.
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
	if err := k.Create(ctx, created); err != nil {
		return fmt.Errorf("restore %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	if !withStatus || !hasStatus {
		return nil
	}
	created.Object["status"] = status
	if err := k.Status().Update(ctx, created); err != nil {
		return fmt.Errorf("restore the status of %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}
