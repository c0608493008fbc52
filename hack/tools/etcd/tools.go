//go:build tools

// Package etcd pins the etcd server that envtest and the local cluster run.
package etcd

import _ "go.etcd.io/etcd/server/v3"
