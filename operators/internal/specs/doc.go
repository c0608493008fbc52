// Package specs holds what every system's builders share: the one pod builder (Pod.Template:
// NATS credentials mounted as files, the key from a Secret or Vault, the health/readiness/
// metrics port scheme, the restricted security context), host-network mode, the labels, the
// runtime the operator was started with, and the rendering of the NATS server's accounts.
// Each system's builders live beside it, without name prefixes: specs/mohito, specs/pda
// (CloudNativePG keeps its second product in pkg/specs/pgbouncer the same way).
//
// Every builder is a pure function of the custom resources: reconcilers apply what it returns,
// and it never talks to the API server, so it is golden-tested without a cluster (the
// CloudNativePG habit). The services' side of the contract (flags and environment, mounted
// files, ports) is docs/services.md and services/pkg/daemon; e2e tests check that both agree.
package specs
