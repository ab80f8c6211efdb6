// Package version says which build of nmstate-ippool a binary is: the
// release version it was built as (make release, or make build
// VERSION=v1.2.3), and the commit, tree state and Go version the build
// info records.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at link time by the Makefile:
//
//	-ldflags "-X github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version.version=v1.2.3"
//
// It is empty in a build that was not given one. revision is the commit,
// set the same way (make does), for builds whose build info records none
// (go build -buildvcs=false, or a build outside the checkout), and
// modified is "true" when that commit's tree had uncommitted changes.
var version, revision, modified string

// Devel is the version of a build that was given none.
const Devel = "devel"

// Info describes one build.
type Info struct {
	// Version is the release version, or Devel.
	Version string `json:"version"`
	// Revision is the commit the binary was built from, "" if the build
	// did not record it (a build outside a git checkout, or go run).
	Revision string `json:"revision,omitempty"`
	// Modified is set when the tree had changes that were not committed.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"goVersion"`
}

// Get returns the build's Info.
func Get() Info {
	i := from(version, revision, debug.ReadBuildInfo)
	i.Modified = i.Modified || modified == "true"
	return i
}

func from(v, rev string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: v, Revision: rev}
	if bi, ok := read(); ok {
		info.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
		// A binary installed with go install module@v1.2.3 knows its
		// version from the module.
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
	}
	if info.Version == "" {
		info.Version = Devel
	}
	return info
}

// String is one line: "v1.2.3 (commit 0123abc, go1.26.8)", with
// "modified" when the tree had uncommitted changes.
func (i Info) String() string {
	var about []string
	if i.Revision != "" {
		commit := "commit " + short(i.Revision)
		if i.Modified {
			commit += ", modified"
		}
		about = append(about, commit)
	}
	if i.GoVersion != "" {
		about = append(about, i.GoVersion)
	}
	if len(about) == 0 {
		return i.Version
	}
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(about, ", "))
}

// KeysAndValues are the Info as a logger's key-value pairs.
func (i Info) KeysAndValues() []any {
	return []any{"version", i.Version, "revision", i.Revision, "modified", i.Modified, "goVersion", i.GoVersion}
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// Collector is nmstate_ippool_build_info: always 1, labelled with the
// component (handler, pool-controller) and the build's version, revision
// and Go version, so that a query tells which build runs where.
func Collector(component string) prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nmstate_ippool_build_info",
		Help: "Which build of nmstate-ippool runs: 1, labelled with its component, version, revision and Go version.",
		ConstLabels: prometheus.Labels{"component": component, "version": i.Version, "revision": i.Revision,
			"go_version": i.GoVersion},
	})
	g.Set(1)
	return g
}
