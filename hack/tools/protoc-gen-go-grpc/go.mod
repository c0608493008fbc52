module github.com/obscura-iot/obscura/hack/tools/protoc-gen-go-grpc

go 1.26.0

require google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2

require google.golang.org/protobuf v1.36.11 // indirect
