package version

import (
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFrom(t *testing.T) {
	built := func(main string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: main}, Settings: settings}, true
		}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}
	dirty := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	for _, tt := range []struct {
		name, version, revision string
		read                    func() (*debug.BuildInfo, bool)
		want                    Info
		line                    string
	}{
		{"a release build", "v1.2.3", "", built("(devel)", rev),
			Info{Version: "v1.2.3", Revision: rev.Value, GoVersion: "go1.26.8"}, "v1.2.3 (commit 0123456789ab, go1.26.8)"},
		{"a development build of a changed tree", "", "", built("(devel)", rev, dirty),
			Info{Version: Devel, Revision: rev.Value, Modified: true, GoVersion: "go1.26.8"}, "devel (commit 0123456789ab, modified, go1.26.8)"},
		{"go install module@version", "", "", built("v0.4.0"),
			Info{Version: "v0.4.0", GoVersion: "go1.26.8"}, "v0.4.0 (go1.26.8)"},
		{"the link-time version wins over the module's", "v1.2.3", "", built("v0.4.0"),
			Info{Version: "v1.2.3", GoVersion: "go1.26.8"}, "v1.2.3 (go1.26.8)"},
		{"no build info", "", "", func() (*debug.BuildInfo, bool) { return nil, false },
			Info{Version: Devel}, "devel"},
		{"a revision given at link time, none recorded (-buildvcs=false)", "v1.2.3", "0123456789abcdef0123", built("(devel)"),
			Info{Version: "v1.2.3", Revision: rev.Value, GoVersion: "go1.26.8"}, "v1.2.3 (commit 0123456789ab, go1.26.8)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := from(tt.version, tt.revision, tt.read)
			if got != tt.want {
				t.Errorf("from() = %+v, want %+v", got, tt.want)
			}
			if got.String() != tt.line {
				t.Errorf("String() = %q, want %q", got.String(), tt.line)
			}
		})
	}
}

// TestCollector: the build info series is 1 and names this build.
func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector("handler"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "nmstate_ippool_build_info" || len(families[0].Metric) != 1 {
		t.Fatalf("gathered %v, want one nmstate_ippool_build_info series", families)
	}
	m := families[0].Metric[0]
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || labels["component"] != "handler" || labels["version"] != Get().Version ||
		labels["go_version"] != Get().GoVersion {
		t.Errorf("build info %v = %v, want 1 with component handler, version %q and go_version %q",
			labels, m.GetGauge().GetValue(), Get().Version, Get().GoVersion)
	}
}
