// Command obscura holds what belongs to the platform rather than to one system:
//
//	obscura demo            one process: every system's simulator on embedded NATS JetStream
//	                        (one account per trust domain); Mohito rounds live, then one PDA
//	                        aggregation; exits with a summary
//	obscura nats-reloader   the NATS server's sidecar: makes it reload the accounts the
//	                        operator renders (--watch <file> --pid-file <file>)
//	obscura probe           Kubernetes exec probe of any role (package daemon)
//	obscura provision       creates what the Obscura resources of a namespace reference (trust
//	                        domains' namespaces, key Secrets, tokens, device registries, TLS
//	                        Secrets) and never replaces what exists (docs/chart.md)
//
// Every flag --x-y falls back to OBSCURA_X_Y. A configuration error, a malformed environment
// value included, exits with status 2.
package main

import "github.com/obscura-iot/obscura/services/pkg/daemon"

// errConfig marks a configuration error: the process exits with status 2.
var errConfig = daemon.ErrConfig

func main() {
	daemon.Main("obscura", []daemon.Command{
		{Name: "demo", Run: runDemo},
		{Name: "nats-reloader", Run: runNATSReloader},
		{Name: "probe", Run: daemon.RunProbe},
		{Name: "provision", Run: runProvision},
	})
}
