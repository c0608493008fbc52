//go:build tools

// Package promtool pins promtool (built by hack/tools.sh into ./bin for `make rules-test`:
// `promtool check rules` and `promtool test rules` on monitoring/rules).
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"
