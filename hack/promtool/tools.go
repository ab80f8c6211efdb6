//go:build tools

// Package tools pins promtool, which CI uses to unit-test the alerting
// rules in deploy/alerts (make test-alerts).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
