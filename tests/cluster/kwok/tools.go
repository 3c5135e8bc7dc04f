//go:build tools

// Package tools pins the kwok command so that `go build sigs.k8s.io/kwok/cmd/kwok`
// resolves from this module's go.sum.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
