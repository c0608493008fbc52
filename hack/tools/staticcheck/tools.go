//go:build tools

// Package staticcheck pins staticcheck (built by hack/tools.sh into ./bin for `make lint`).
package staticcheck

import _ "honnef.co/go/tools/cmd/staticcheck"
