//go:build tools

// Package protocgengogrpc pins protoc-gen-go-grpc, which generates the user API's gRPC stubs
// (services/proto).
package protocgengogrpc

import _ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
