// Package pda describes, as pure functions of an AggregationJob (pda.obscura.dev), every
// Kubernetes object the operator runs for PDA in the job's two trust domains: the public
// parameters ConfigMap of each domain, the proxy domain's ingress, mixer and oracle, the
// database domain's front-ends and shard StatefulSet, their Services, ServiceAccounts and NATS
// credentials, and the result sink in the job's namespace. Pods are made by the shared builder
// of package specs, so the PDA roles run under the conventions every system shares.
//
// The services' side (subcommands, flags, NATS and KV names) is docs/pda.md and
// services/pkg/pda/contract; the golden files under testdata show what each role is given.
package pda
