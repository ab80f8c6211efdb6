// Package annotations edits annotations without losing a value someone set
// meanwhile.
package annotations

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemoveAnnotation removes the annotation key from o if it still has the
// value o shows: a JSON patch tests the value before removing it, so a value
// someone set meanwhile is kept (and acted on later). An object that is gone
// or whose value changed needs nothing.
func RemoveAnnotation(ctx context.Context, c client.Client, o client.Object, key string) error {
	value, ok := o.GetAnnotations()[key]
	if !ok {
		return nil
	}
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
	raw, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, o, client.RawPatch(types.JSONPatchType, raw))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
		return fmt.Errorf("remove the %s annotation from %s: %w", key, o.GetName(), err)
	}
	return nil
}
