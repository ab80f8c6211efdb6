package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long the API server's answers are reused: a token known good for a
// minute, a token refused for ten seconds; a caller allowed for five
// minutes, refused for thirty seconds (the delegated authentication and
// authorization of Kubernetes' own components keep theirs as long). Each
// API call is given reviewTimeout.
const (
	authenticatedFor = time.Minute
	unauthenticFor   = 10 * time.Second
	allowedFor       = 5 * time.Minute
	deniedFor        = 30 * time.Second
	reviewTimeout    = 10 * time.Second
	// cacheSize bounds each cache: beyond it, expired answers are swept,
	// and if none had expired the cache starts over.
	cacheSize = 1024
)

// authenticator asks the API server who a bearer token is (a TokenReview).
type authenticator interface {
	review(ctx context.Context, token string) (authnv1.UserInfo, bool, error)
}

// authorizer asks the API server whether user may verb path (a
// SubjectAccessReview of a non-resource URL), and why not.
type authorizer interface {
	allowed(ctx context.Context, user authnv1.UserInfo, verb, path string) (bool, string, error)
}

// delegate is a metrics filter that leaves both questions to the API
// server, as kubebuilder's scaffold does, with the answers cached.
type delegate struct {
	authn authenticator
	authz authorizer
	now   func() time.Time

	users   answers[authnv1.UserInfo]
	verdict answers[string]
}

// filter returns the metrics server's filter, reviewing with the API
// server of config through httpClient.
func filter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("a TokenReview client: %w", err)
	}
	authz, err := authzclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("a SubjectAccessReview client: %w", err)
	}
	d := &delegate{authn: tokenReviews{authn.TokenReviews()}, authz: accessReviews{authz.SubjectAccessReviews()}, now: time.Now}
	return d.wrap, nil
}

// wrap serves next to the callers the API server authenticates and
// authorizes: 401 without a bearer token or with one it does not know,
// 403 when it refuses the caller, 500 when it cannot be asked.
func (d *delegate) wrap(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearer(req.Header.Get("Authorization"))
		if !ok {
			http.Error(w, "Unauthorized: send a bearer token", http.StatusUnauthorized)
			return
		}
		user, known, err := d.who(req.Context(), token)
		if err != nil {
			log.Error(err, "Authenticating a metrics scrape")
			http.Error(w, "Authentication failed: the API server could not review the token", http.StatusInternalServerError)
			return
		}
		if !known {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(req.Method)
		why, err := d.may(req.Context(), user, verb, req.URL.Path)
		if err != nil {
			log.Error(err, "Authorizing a metrics scrape", "user", user.Username)
			http.Error(w, "Authorization for user "+user.Username+" failed", http.StatusInternalServerError)
			return
		}
		if why != "" {
			log.V(4).Info("Metrics scrape refused", "user", user.Username, "reason", why)
			http.Error(w, fmt.Sprintf("Forbidden: user %s may not %s %s", user.Username, verb, req.URL.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	}), nil
}

// bearer returns the token of an Authorization header "Bearer TOKEN".
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// who is the user of token, and whether the API server knows it.
func (d *delegate) who(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(token)))
	if user, ok := d.users.get(key, d.now()); ok {
		return user, user.Username != "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	user, ok, err := d.authn.review(ctx, token)
	if err != nil {
		return authnv1.UserInfo{}, false, err
	}
	if !ok || user.Username == "" {
		d.users.put(key, authnv1.UserInfo{}, d.now(), unauthenticFor)
		return authnv1.UserInfo{}, false, nil
	}
	d.users.put(key, user, d.now(), authenticatedFor)
	return user, true, nil
}

// may returns "" when user may verb path, or why not.
func (d *delegate) may(ctx context.Context, user authnv1.UserInfo, verb, path string) (string, error) {
	key := fmt.Sprintf("%q %q %q %q %q %q", user.Username, user.UID, user.Groups, user.Extra, verb, path)
	if why, ok := d.verdict.get(key, d.now()); ok {
		return why, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	ok, why, err := d.authz.allowed(ctx, user, verb, path)
	if err != nil {
		return "", err
	}
	if ok {
		d.verdict.put(key, "", d.now(), allowedFor)
		return "", nil
	}
	if why == "" {
		why = "no RBAC rule allows it"
	}
	d.verdict.put(key, why, d.now(), deniedFor)
	return why, nil
}

// answers is a cache of answers that expire.
type answers[T any] struct {
	mu sync.Mutex
	m  map[string]answer[T]
}

type answer[T any] struct {
	value T
	until time.Time
}

func (a *answers[T]) get(key string, now time.Time) (T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, ok := a.m[key]
	if !ok || !now.Before(got.until) {
		var zero T
		return zero, false
	}
	return got.value, true
}

func (a *answers[T]) put(key string, value T, now time.Time, ttl time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= cacheSize {
		for k, v := range a.m {
			if !now.Before(v.until) {
				delete(a.m, k)
			}
		}
	}
	if a.m == nil || len(a.m) >= cacheSize {
		a.m = map[string]answer[T]{}
	}
	a.m[key] = answer[T]{value: value, until: now.Add(ttl)}
}

// tokenReviews authenticates with TokenReviews.
type tokenReviews struct {
	c authnclient.TokenReviewInterface
}

func (t tokenReviews) review(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	r, err := t.c.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, fmt.Errorf("create TokenReview: %w", err)
	}
	// A token the API server does not take (unknown, expired, for another
	// audience) is not authenticated, whatever error it adds: the caller
	// gets 401, not 500.
	return r.Status.User, r.Status.Authenticated, nil
}

// accessReviews authorizes with SubjectAccessReviews.
type accessReviews struct {
	c authzclient.SubjectAccessReviewInterface
}

func (a accessReviews) allowed(ctx context.Context, user authnv1.UserInfo, verb, path string) (bool, string, error) {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	r, err := a.c.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("create SubjectAccessReview: %w", err)
	}
	if !r.Status.Allowed && r.Status.Reason == "" {
		return false, r.Status.EvaluationError, nil
	}
	return r.Status.Allowed, r.Status.Reason, nil
}
