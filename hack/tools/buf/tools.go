//go:build tools

// Package buf pins buf, the protobuf compiler that drives protoc-gen-go and protoc-gen-go-grpc
// for services/proto (local plugins only: no network at generate time).
package buf

import _ "github.com/bufbuild/buf/cmd/buf"
