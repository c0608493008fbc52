// Package monitoring checks the monitoring path of docs/metrics.md: the chart renders
// PodMonitors and PrometheusRules when the Prometheus operator's API is served (or a value asks
// for them) and prometheus.io/* pod annotations otherwise, the PrometheusRules are the plain rule
// files (charts/obscura/rules) verbatim, and every metric the code registers is documented in
// docs/metrics.md with a conforming name or a recorded finding. The rules themselves are unit
// tested with promtool (`make rules-test`, monitoring/tests).
package monitoring
