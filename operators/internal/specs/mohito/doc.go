// Package mohito describes, as pure functions of the custom resources, every Kubernetes object
// the operator runs for Mohito (mohito.obscura.dev): the deployment ConfigMap the services
// read, the integrator's Deployments (coordinator, gateway, decrypt workers, responder) and
// encoder StatefulSet, the vendor agent and shuffler Deployments, their Services,
// ServiceAccounts, NATS credentials and PodDisruptionBudgets. Pods are made by the shared
// builder of package specs.
//
// The services' side of the contract (subcommands, flags and environment, mounted files, NATS
// and KV names) is docs/services.md and services/pkg/mohito/contract; these builders and
// services/cmd/mohito must agree on it, and e2e tests check that they do.
package mohito
