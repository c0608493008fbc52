//go:build tools

// Package metricsserver pins metrics-server for the local cluster (hack/cluster). hack/tools.sh
// builds sigs.k8s.io/metrics-server/cmd/metrics-server from here.
package metricsserver

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
