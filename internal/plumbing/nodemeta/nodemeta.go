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

// Lookup tells whether Nodes exist, under which UID, and whether they are
// being deleted, for one pass over many names: by one read each, or, from
// ListFrom names on, from one list made on first use. It is not safe for
// concurrent use.
type Lookup struct {
	// Reader reads the Nodes; it should not be a cache when a stale
	// answer could free an address.
	Reader client.Reader
	// List makes the lookup list the Nodes once instead of reading each.
	List bool

	nodes map[string]Presence
}

// Presence is what a Lookup tells of a Node.
type Presence struct {
	// Gone: no Node of the name exists.
	Gone bool
	// UID is the UID of the Node of the name.
	UID types.UID
	// Deleting: the Node is deleted and waits for its finalizers.
	Deleting bool
}

// presenceOf is the Presence of an existing Node.
func presenceOf(n *metav1.PartialObjectMetadata) Presence {
	return Presence{UID: n.UID, Deleting: !n.DeletionTimestamp.IsZero()}
}

// Node tells of the Node name.
func (l *Lookup) Node(ctx context.Context, name string) (Presence, error) {
	if !l.List {
		n, err := Get(ctx, l.Reader, name)
		switch {
		case apierrors.IsNotFound(err):
			return Presence{Gone: true}, nil
		case err != nil:
			return Presence{}, err
		}
		return presenceOf(n), nil
	}
	if l.nodes == nil {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := l.Reader.List(ctx, nodes); err != nil {
			return Presence{}, fmt.Errorf("list nodes: %w", err)
		}
		l.nodes = make(map[string]Presence, len(nodes.Items))
		for i := range nodes.Items {
			l.nodes[nodes.Items[i].Name] = presenceOf(&nodes.Items[i])
		}
	}
	p, ok := l.nodes[name]
	if !ok {
		return Presence{Gone: true}, nil
	}
	return p, nil
}
