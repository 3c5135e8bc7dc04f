//go:build tools

// Package tools pins promtool, which checks config/prometheus/rules.yaml.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
