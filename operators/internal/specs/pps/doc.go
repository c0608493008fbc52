// Package pps describes, as pure functions of a SecurePipeline (pps.obscura.dev), every
// Kubernetes object the operator runs for PPS in the pipeline's two trust domains
// (shared/specs/publish-process-subscribe.md §5.3–5.4): the pipelines file both parties read,
// the broker in the pipeline's namespace (its NATS user and its devices' users, its
// Deployment and metrics Service) and the garbler in its own namespace (its Deployment,
// gRPC Service and the NetworkPolicy letting only the broker in). The garbler is given no
// NATS credentials at all (spec §10 #10). Pods are made by the shared builder of package
// specs, so the PPS roles run under the conventions every system shares.
//
// The services' side (subcommands, flags, the pipelines file) is docs/pps.md and
// services/pkg/pps/contract; the golden files under testdata show what each role is given.
package pps
