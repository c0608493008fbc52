//go:build tools

// Package kube pins the Kubernetes control-plane components that the tests run
// for real (kube-apiserver for envtest). hack/tools.sh builds them from here:
// bin/kube-apiserver, and bin/kube (./cmd/kube), the multi-call binary of the
// local cluster (hack/cluster, docs/cluster.md).
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
