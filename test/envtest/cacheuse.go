package envtest

import (
	"context"
	"reflect"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheUse is a manager's cache that records the Go types of the objects
// it was asked for, by a read or for an informer: whether a process keeps
// a kind whole or as metadata only (metav1.PartialObjectMetadata).
type cacheUse struct {
	cache.Cache
	mu    sync.Mutex
	types map[reflect.Type]bool
}

// newCacheUse returns the NewCache of a manager whose cache records its
// use into *into.
func newCacheUse(into **cacheUse) func(*rest.Config, cache.Options) (cache.Cache, error) {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		c, err := cache.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		*into = &cacheUse{Cache: c, types: map[reflect.Type]bool{}}
		return *into, nil
	}
}

func (c *cacheUse) note(o any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.types[reflect.TypeOf(o)] = true
}

// asked reports whether the cache was asked for objects of o's type.
func (c *cacheUse) asked(o any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.types[reflect.TypeOf(o)]
}

func (c *cacheUse) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.note(obj)
	return c.Cache.Get(ctx, key, obj, opts...)
}

func (c *cacheUse) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.note(list)
	return c.Cache.List(ctx, list, opts...)
}

func (c *cacheUse) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.note(obj)
	return c.Cache.GetInformer(ctx, obj, opts...)
}
