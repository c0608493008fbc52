module github.com/obscura-iot/obscura/hack/tools/protoc-gen-go

go 1.26.0

require google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
