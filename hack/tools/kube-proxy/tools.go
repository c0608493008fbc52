//go:build tools

// Package kubeproxy pins kube-proxy for the local cluster's multi-node mode (hack/cluster,
// docs/cluster.md "Multi-node"): the same k8s.io/kubernetes release and replaces as
// hack/tools/kube, built by hack/tools.sh into bin/kube-proxy.
package kubeproxy

import _ "k8s.io/kubernetes/cmd/kube-proxy"
