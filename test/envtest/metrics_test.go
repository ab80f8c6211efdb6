package envtest

import "testing"

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(`# HELP nmstate_ippool_free_addresses Addresses of the pool left to hand out.
# TYPE nmstate_ippool_free_addresses gauge
nmstate_ippool_free_addresses{pool="a"} 3
nmstate_ippool_free_addresses{pool="b"} 0
nmstate_ippool_status_condition{pool="a",reason="ReconciledPool",status="True",type="Available"} 1
process_open_fds 12
go_gc_duration_seconds{quantile="0.5"} 1.5e-05
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		want  map[string]string
		value float64
		found bool
	}{
		{"nmstate_ippool_free_addresses", map[string]string{"pool": "a"}, 3, true},
		{"nmstate_ippool_free_addresses", map[string]string{"pool": "b"}, 0, true},
		{"nmstate_ippool_free_addresses", map[string]string{"pool": "c"}, 0, false},
		{"nmstate_ippool_status_condition", map[string]string{"pool": "a", "type": "Available", "status": "True"}, 1, true},
		{"nmstate_ippool_status_condition", map[string]string{"pool": "a", "status": "False"}, 0, false},
		{"process_open_fds", nil, 12, true},
		{"go_gc_duration_seconds", map[string]string{"quantile": "0.5"}, 1.5e-05, true},
	} {
		v, ok := m.Value(c.name, c.want)
		if v != c.value || ok != c.found {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.want, v, ok, c.value, c.found)
		}
	}
	if _, err := ParseMetrics("lonely"); err == nil {
		t.Error("a line without a value parsed")
	}
}
