package envtest

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolwrite"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// WithoutWatch lets an interceptor wrap a client that does not watch (a
// manager's, or one of client.New): its Watch fails, and the code under
// test never calls it.
type WithoutWatch struct{ client.Client }

// Watch is not supported.
func (WithoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}

// CreateForTest creates o and, when the test ends, deletes it whatever
// finalizers it holds then.
func CreateForTest(t testing.TB, c client.Client, o client.Object) error {
	ctx := context.Background()
	if err := c.Create(ctx, o); err != nil {
		return err
	}
	t.Cleanup(func() {
		if c.Get(ctx, client.ObjectKeyFromObject(o), o) == nil {
			o.SetFinalizers(nil)
			_ = c.Update(ctx, o)
			_ = c.Delete(ctx, o)
		}
	})
	return nil
}

// PoolWriteFault makes the pool status writes of a FailingPoolWrites
// Writer fail while On is set, and counts those it refused.
type PoolWriteFault struct {
	On      atomic.Bool
	Refused atomic.Int32
}

// FailingPoolWrites returns a Writer like w whose pool status writes
// fail (503) while fault is on, as when the API server refuses them or the
// process dies first; reads and other writes go through.
func FailingPoolWrites(w *poolwrite.Writer, fault *PoolWriteFault) *poolwrite.Writer {
	c := interceptor.NewClient(WithoutWatch{Client: w.Client}, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string,
		obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if _, ok := obj.(*ippoolv1.NodeIPPool); ok && fault.On.Load() {
			fault.Refused.Add(1)
			return apierrors.NewServiceUnavailable("the API server is going away")
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}})
	failing := poolwrite.NewWriter(w.Reader, c, w.Clock)
	failing.Audit, failing.OnWrite, failing.OnConflict = w.Audit, w.OnWrite, w.OnConflict
	return failing
}

// VouchedPool creates a pool of cidr whose status carries the stamp the
// pool controller writes after a rebuild, and returns it as stored.
func VouchedPool(ctx context.Context, c client.Client, name, cidr string) (*ippoolv1.NodeIPPool, error) {
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ippoolv1.NodeIPPoolSpec{Range: ippoolv1.IPRange{CIDR: cidr}}}
	if err := c.Create(ctx, p); err != nil {
		return nil, err
	}
	_, err := poolwrite.NewWriter(c, c, clock.RealClock{}).Update(ctx, name,
		func(*ippoolv1.NodeIPPool, *ippool.Allocator) (bool, error) { return true, nil }, poolwrite.Vouch(func(error) {}))
	if err != nil {
		return nil, err
	}
	return p, c.Get(ctx, client.ObjectKeyFromObject(p), p)
}

// Scrape gets a metrics endpoint over HTTPS with token (none if empty) and
// returns the status code and the body. The components' endpoints serve a
// certificate they sign themselves at start, which no test can know: what
// a scrape checks is who may read, not who serves.
func Scrape(ctx context.Context, url, token string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// PublishState writes the status of a node's NodeNetworkState as its
// handler would, stamped at (to the second), creating the object first if
// it is missing; it retries on conflicts.
func PublishState(ctx context.Context, c client.Client, node, state string, at time.Time) error {
	nns := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(nns), nns); apierrors.IsNotFound(err) {
		if err := c.Create(ctx, nns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(nns), nns); err != nil {
			return err
		}
		nns.Status.CurrentState.Raw = []byte(state)
		nns.Status.LastSuccessfulUpdateTime = metav1.NewTime(at.Truncate(time.Second))
		return c.Status().Update(ctx, nns)
	})
}

// CreateAvailablePool creates a pool, waits up to timeout until the pool
// controller has made it Available, and deletes it when the test ends; a
// pool no controller lets go (the test stopped its controller first)
// loses its finalizer by hand once it has been deleting for twice grace.
func CreateAvailablePool(t testing.TB, c client.Client, name string, spec ippoolv1.NodeIPPoolSpec, grace, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	p := &ippoolv1.NodeIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("create NodeIPPool %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.Delete(ctx, p)
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			var got ippoolv1.NodeIPPool
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
				return apierrors.IsNotFound(err), nil
			}
			if got.DeletionTimestamp != nil && time.Since(got.DeletionTimestamp.Time) > 2*grace {
				got.SetFinalizers(nil)
				_ = c.Update(ctx, &got)
			}
			return false, nil
		})
	})
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var got ippoolv1.NodeIPPool
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, ippoolv1.ConditionAvailable)
		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("NodeIPPool %s did not become Available within %s: %v", name, timeout, err)
	}
}

// Annotate sets the annotation key to value on o, read again from the API
// server until the update does not conflict.
func Annotate(ctx context.Context, c client.Client, o client.Object, key, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		a := o.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[key] = value
		o.SetAnnotations(a)
		return c.Update(ctx, o)
	})
}

// Every calls f every interval, after the first interval, until the test
// ends; the test's end waits for the call under way.
func Every(t testing.TB, interval time.Duration, f func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(interval):
			}
			f()
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
}

// Edit reads obj again, changes it with edit and updates it, reading and
// changing it again on a conflict: an admin's edit of an object that
// controllers write too.
func Edit[T client.Object](ctx context.Context, c client.Client, obj T, edit func(T)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		edit(obj)
		return c.Update(ctx, obj)
	})
}
