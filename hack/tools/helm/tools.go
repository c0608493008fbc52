//go:build tools

// Package helm pins the helm CLI used for lint, render checks and installs.
package helm

import _ "helm.sh/helm/v4/cmd/helm"
