//go:build tools

// Package vault pins the Vault binary the tests run as a dev server (hack/tools.sh builds it).
package vault

import _ "github.com/hashicorp/vault"
