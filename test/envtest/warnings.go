package envtest

import (
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Warnings collects the warnings the API server sends with its answers
// (admission webhooks' among them), as kubectl prints them. Set it as a
// rest.Config's WarningHandler; it is safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	seen []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// Take returns the warnings received since the last Take, one a line.
func (w *Warnings) Take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := strings.Join(w.seen, "\n")
	w.seen = nil
	return out
}

// WarnedClient returns a client of cfg's cluster whose warnings the
// returned Warnings collect.
func WarnedClient(cfg *rest.Config, opts client.Options) (client.Client, *Warnings, error) {
	w := &Warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	c, err := client.New(cfg, opts)
	return c, w, err
}
