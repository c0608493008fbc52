//go:build tools

// Package kustomize pins kustomize, which builds the config/ bases.
package kustomize

import _ "sigs.k8s.io/kustomize/kustomize/v5"
