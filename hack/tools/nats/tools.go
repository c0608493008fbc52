//go:build tools

// Package nats pins the nats-server binary used by the local cluster and images.
package nats

import _ "github.com/nats-io/nats-server/v2"
