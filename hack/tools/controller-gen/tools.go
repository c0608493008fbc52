//go:build tools

// Package controllergen pins controller-gen, which generates deepcopy, CRDs and RBAC.
package controllergen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
