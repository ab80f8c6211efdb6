package peerbench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

var (
	profileDir = flag.String("peer.profile", "",
		"a directory: for each rollout, a CPU profile of kube-apiserver over -peer.profile-seconds from the policy's creation "+
			"is written there as <nodes>-<case>-<run>.pprof (compare two with go tool pprof -diff_base)")
	profileSeconds = flag.Int("peer.profile-seconds", 8,
		"how long each profile of -peer.profile lasts; longer than the rollouts, so that each holds all of one")
)

// apiServerProfile is a CPU profile of kube-apiserver being taken.
type apiServerProfile struct {
	done chan struct{}
}

// profileRollout starts a CPU profile of kube-apiserver (its
// /debug/pprof, which it serves by default to those allowed to read
// it) that the rollout of name, run run, is about to start; nil
// without -peer.profile.
func (m *meter) profileRollout(name string, run int) *apiServerProfile {
	if *profileDir == "" {
		return nil
	}
	must(m.b, os.MkdirAll(*profileDir, 0o755))
	out := filepath.Join(*profileDir, fmt.Sprintf("%d-%s-%d.pprof", m.nodes, name, run+1))
	hc, err := rest.HTTPClientFor(m.cfg)
	must(m.b, err)
	p := &apiServerProfile{done: make(chan struct{})}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", m.cfg.Host, *profileSeconds)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*profileSeconds+30)*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	must(m.b, err)
	go func() {
		defer close(p.done)
		defer cancel()
		if err := fetchTo(hc, req, out); err != nil {
			fmt.Printf("profile of kube-apiserver for %s: %v\n", out, err)
		}
	}()
	return p
}

// wait returns once the profile is written (or failed).
func (p *apiServerProfile) wait() {
	if p != nil {
		<-p.done
	}
}

// fetchTo writes what req answers into the file out.
func fetchTo(hc *http.Client, req *http.Request, out string) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
