package envtest

import (
	"fmt"
	"strconv"
	"strings"
)

// MetricSample is one series of a scrape: its labels and value.
type MetricSample struct {
	Labels map[string]string
	Value  float64
}

// Metrics is a scrape in Prometheus's text format, by metric name.
type Metrics map[string][]MetricSample

// ParseMetrics reads a scrape's body (Scrape) in Prometheus's text
// format. Label values holding commas or escaped quotes are not
// supported; the project's never do.
func ParseMetrics(body string) (Metrics, error) {
	out := Metrics{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, "} ")
		if i < 0 {
			i = strings.Index(line, " ")
		} else {
			i++
		}
		if i < 0 {
			return nil, fmt.Errorf("a line without a value: %q", line)
		}
		series, value := line[:i], strings.Fields(line[i:])
		v, err := strconv.ParseFloat(value[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		name, labels, _ := strings.Cut(series, "{")
		s := MetricSample{Labels: map[string]string{}, Value: v}
		for _, pair := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if k, val, ok := strings.Cut(pair, "="); ok {
				s.Labels[k] = strings.Trim(val, `"`)
			}
		}
		out[name] = append(out[name], s)
	}
	return out, nil
}

// Value returns the value of the sample of name whose labels include
// every one of want, and whether there is one.
func (m Metrics) Value(name string, want map[string]string) (float64, bool) {
	for _, s := range m[name] {
		matched := true
		for k, v := range want {
			if s.Labels[k] != v {
				matched = false
				break
			}
		}
		if matched {
			return s.Value, true
		}
	}
	return 0, false
}
