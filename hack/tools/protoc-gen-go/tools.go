//go:build tools

// Package protocgengo pins protoc-gen-go, which generates the user API's protobuf messages
// (services/proto). Same google.golang.org/protobuf version as services/go.mod.
package protocgengo

import _ "google.golang.org/protobuf/cmd/protoc-gen-go"
