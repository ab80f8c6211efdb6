package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
)

// fakeAPI answers the reviews as an API server would, counting them.
type fakeAPI struct {
	users   map[string]authnv1.UserInfo // by token
	bound   map[string]bool             // by user
	down    bool
	reviews int
	checks  int
}

func (f *fakeAPI) review(_ context.Context, token string) (authnv1.UserInfo, bool, error) {
	f.reviews++
	if f.down {
		return authnv1.UserInfo{}, false, errors.New("connection refused")
	}
	u, ok := f.users[token]
	return u, ok, nil
}

func (f *fakeAPI) allowed(_ context.Context, user authnv1.UserInfo, verb, path string) (bool, string, error) {
	f.checks++
	if f.down {
		return false, "", errors.New("connection refused")
	}
	if verb != "get" || path != "/metrics" {
		return false, "only get /metrics", nil
	}
	return f.bound[user.Username], "", nil
}

// serve returns the filter over a handler that answers "metrics", with
// its clock.
func serve(t *testing.T, api *fakeAPI) (http.Handler, *time.Time) {
	t.Helper()
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	d := &delegate{authn: api, authz: api, now: func() time.Time { return now }}
	h, err := d.wrap(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "metrics")
	}))
	if err != nil {
		t.Fatal(err)
	}
	return h, &now
}

func get(h http.Handler, method, path, authorization string) int {
	req := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestFilterAnswers: each kind of caller gets the code a scraper can act
// on, and the API server is asked only what a header can tell.
func TestFilterAnswers(t *testing.T) {
	api := &fakeAPI{
		users: map[string]authnv1.UserInfo{"good": {Username: "prometheus"}, "nosy": {Username: "nosy"}},
		bound: map[string]bool{"prometheus": true},
	}
	h, _ := serve(t, api)
	for _, tt := range []struct {
		who, method, path, header string
		want                      int
	}{
		{"no header", "GET", "/metrics", "", http.StatusUnauthorized},
		{"basic credentials", "GET", "/metrics", "Basic dXNlcjpwYXNz", http.StatusUnauthorized},
		{"an empty bearer token", "GET", "/metrics", "Bearer  ", http.StatusUnauthorized},
		{"a token the API server does not know", "GET", "/metrics", "Bearer forged", http.StatusUnauthorized},
		{"a known caller nothing allows", "GET", "/metrics", "Bearer nosy", http.StatusForbidden},
		{"an allowed caller", "GET", "/metrics", "Bearer good", http.StatusOK},
		{"an allowed caller, lower-case scheme", "GET", "/metrics", "bearer good", http.StatusOK},
		{"an allowed caller posting", "POST", "/metrics", "Bearer good", http.StatusForbidden},
		{"an allowed caller elsewhere", "GET", "/debug", "Bearer good", http.StatusForbidden},
	} {
		if got := get(h, tt.method, tt.path, tt.header); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.who, got, tt.want)
		}
	}
	if api.reviews != 3 {
		t.Errorf("%d TokenReviews, want 3: one per distinct token (forged, nosy, good), the bad headers none", api.reviews)
	}
}

// TestFilterCaches: a scraper every few seconds costs the API server one
// review a minute, a refusal is not remembered longer than its TTL, and an
// API server that cannot answer gives 500, never a pass.
func TestFilterCaches(t *testing.T) {
	api := &fakeAPI{users: map[string]authnv1.UserInfo{"good": {Username: "prometheus"}}, bound: map[string]bool{}}
	h, now := serve(t, api)
	if got := get(h, "GET", "/metrics", "Bearer good"); got != http.StatusForbidden {
		t.Fatalf("before its binding: %d, want 403", got)
	}
	api.bound["prometheus"] = true
	if got := get(h, "GET", "/metrics", "Bearer good"); got != http.StatusForbidden {
		t.Fatalf("a refusal within its %v: %d, want 403 (cached)", deniedFor, got)
	}
	*now = now.Add(deniedFor)
	if got := get(h, "GET", "/metrics", "Bearer good"); got != http.StatusOK {
		t.Fatalf("after the refusal expired: %d, want 200", got)
	}
	reviews, checks := api.reviews, api.checks
	for range 10 {
		*now = now.Add(5 * time.Second)
		if got := get(h, "GET", "/metrics", "Bearer good"); got != http.StatusOK {
			t.Fatalf("a cached scrape: %d, want 200", got)
		}
	}
	if api.reviews-reviews != 1 || api.checks != checks {
		t.Errorf("50 s of scrapes cost %d TokenReviews and %d SubjectAccessReviews, want 1 and 0",
			api.reviews-reviews, api.checks-checks)
	}

	api.down = true
	*now = now.Add(allowedFor)
	if got := get(h, "GET", "/metrics", "Bearer good"); got != http.StatusInternalServerError {
		t.Errorf("with the API server down: %d, want 500", got)
	}
	if got := get(h, "GET", "/metrics", "Bearer other"); got != http.StatusInternalServerError {
		t.Errorf("an unknown token with the API server down: %d, want 500", got)
	}
}

// TestAnswersStayBounded: a caller sending a new token each time fills
// the cache to its bound, no further.
func TestAnswersStayBounded(t *testing.T) {
	var a answers[string]
	now := time.Now()
	for i := range 3 * cacheSize {
		a.put(fmt.Sprint(i), "x", now, time.Minute)
		if len(a.m) > cacheSize {
			t.Fatalf("%d answers after %d puts, over %d", len(a.m), i+1, cacheSize)
		}
	}
	if _, ok := a.get(fmt.Sprint(3*cacheSize-1), now); !ok {
		t.Error("the latest answer is not kept")
	}
	if _, ok := a.get(fmt.Sprint(3*cacheSize-1), now.Add(time.Minute)); ok {
		t.Error("an answer is kept past its time")
	}
}
