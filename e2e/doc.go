// Package e2e holds Obscura's end-to-end tests: the shipped binaries run as real processes
// against a real kube-apiserver + etcd, NATS JetStream, Redis and Envoy started on 127.0.0.1 by
// github.com/obscura-iot/obscura/services/testenv. Each subdirectory is one scenario.
package e2e
