//go:build tools

// Package tools pins the golangci-lint command so `go mod tidy` keeps it.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
