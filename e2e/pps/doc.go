// Package pps holds the end-to-end test of the PPS services as the operator runs them: the
// broker's and the garbler's containers from the operator's host-network golden files
// (operators/internal/specs/pps/testdata/host_network.yaml) — their args, environment and
// mounted files as rendered — each run as an OS process of the `pps` binary against a real
// NATS server (the pipeline's account rendered as the operator does, MQTT on) and a
// redis-server per trust domain. Both must pass their rendered readiness probe, and one
// execution of the parking sample's function through them must unmask, at a subscriber, to
// the plaintext model over what the publishers sent. It is the quick proof that the operator
// and the binaries agree; e2e/cluster runs the same in the local cluster.
package pps
