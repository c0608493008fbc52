//go:build tools

// Package prometheus pins the Prometheus server (built by hack/tools.sh into ./bin for the
// dashboard test in e2e/dashboards: a real server scrapes the roles and evaluates every panel's
// query). Same module version and build tags as promtool; the web UI assets are not embedded
// (the `builtinassets` tag is off), which the test does not need: it only uses /api/v1.
package prometheus

import _ "github.com/prometheus/prometheus/cmd/prometheus"
