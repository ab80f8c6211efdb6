// Package nodemeta reads Nodes as metadata only (name, UID, labels): what
// the controllers need of a Node, without its status, which kubelets
// rewrite every few seconds. It is the one place that builds such reads.
package nodemeta

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object returns an empty Node metadata object named name: the type to
// read into, and to restrict a cache with.
func Object(name string) *metav1.PartialObjectMetadata {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	n.Name = name
	return n
}

// Get reads the metadata of the Node name through reader. A missing Node
// is the reader's NotFound error (apierrors.IsNotFound), wrapped.
func Get(ctx context.Context, reader client.Reader, name string) (*metav1.PartialObjectMetadata, error) {
	n := Object(name)
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return nil, fmt.Errorf("get node %q: %w", name, err)
	}
	return n, nil
}

// Lookup tells whether Nodes exist and under which UID, for one pass over
// many names: by one read each, or, from ListFrom names on, from one list
// made on first use. It is not safe for concurrent use.
type Lookup struct {
	// Reader reads the Nodes; it should not be a cache when a stale
	// answer could free an address.
	Reader client.Reader
	// List makes the lookup list the Nodes once instead of reading each.
	List bool

	uids map[string]types.UID
}

// UID returns the UID of the Node name, or gone.
func (l *Lookup) UID(ctx context.Context, name string) (types.UID, bool, error) {
	if !l.List {
		n, err := Get(ctx, l.Reader, name)
		switch {
		case apierrors.IsNotFound(err):
			return "", true, nil
		case err != nil:
			return "", false, err
		}
		return n.UID, false, nil
	}
	if l.uids == nil {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := l.Reader.List(ctx, nodes); err != nil {
			return "", false, fmt.Errorf("list nodes: %w", err)
		}
		l.uids = make(map[string]types.UID, len(nodes.Items))
		for _, n := range nodes.Items {
			l.uids[n.Name] = n.UID
		}
	}
	uid, ok := l.uids[name]
	return uid, !ok, nil
}
