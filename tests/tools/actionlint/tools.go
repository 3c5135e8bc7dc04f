//go:build tools

// Package tools pins actionlint, which checks the release workflow.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
