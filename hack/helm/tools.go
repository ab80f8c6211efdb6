//go:build tools

// Package tools pins Helm, which `make helm` builds into bin/: the chart
// in deploy/helm is linted, rendered and installed with the real Helm.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
