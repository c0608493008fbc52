// Package daemon is the one role runtime every Obscura service binary uses, whatever the
// system: the common flags and their environment fallbacks, secrets read from files, the
// health/readiness/metrics port scheme, the NATS connection, setup retried until the other
// parties are up, readiness kept in step with what the role needs, graceful shutdown and the
// `probe` subcommand.
//
// Conventions (docs/architecture.md):
//
//   - Every flag --x-y falls back to the environment variable OBSCURA_X_Y. A malformed value
//     is a configuration error, like a bad flag: the process exits with status 2.
//   - Secrets come from files (or Vault, package keys), never from flags or variables: the NATS
//     password is --nats-password-file, so no secret shows in /proc/*/cmdline or environ.
//   - Ports: --metrics-addr (default :9090) serves /metrics, --health-addr (default :8081)
//     serves /healthz and /readyz. With port 0 (host-network pods) the bound addresses are
//     written to --addr-file, which `<binary> probe` reads.
//   - Validation does no I/O; loading a file is a step named for what it does, and comes after
//     validation, so a bad configuration never reaches a key store.
package daemon
