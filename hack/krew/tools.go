//go:build tools

// Package tools pins krew and its manifest validation, which CI runs on the
// kubectl plugin's krew manifest and release archives (make test-krew).
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
