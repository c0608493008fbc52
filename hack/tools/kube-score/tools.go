//go:build tools

// Package kubescore pins kube-score (built by hack/tools.sh into ./bin for `make chart-lint`).
package kubescore

import _ "github.com/zegl/kube-score/cmd/kube-score"
