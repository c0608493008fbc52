// Package specs describes, as pure functions of the custom resources, every Kubernetes object
// the operator runs for Mohito: the deployment ConfigMap the services read, the integrator's
// Deployments (coordinator, gateway, decrypt workers, responder) and encoder StatefulSet, the
// vendor agent and shuffler Deployments, their Services, ServiceAccounts and
// PodDisruptionBudgets. Reconcilers apply what these functions return; the functions never
// talk to the API server, so they are golden-tested without a cluster (the CloudNativePG habit).
//
// The services' side of the contract (subcommands, flags and environment, mounted files, NATS
// and KV names) is docs/services.md; these builders and services/cmd/mohito must agree on it,
// and e2e tests check that they do.
package specs
