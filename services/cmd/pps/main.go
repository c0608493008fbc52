// Command pps runs the Secure Publish-Process-Subscribe services
// (shared/specs/publish-process-subscribe.md §5.3–§5.4), one trust domain per role.
//
//	pps garbler       the garbler (trust domain G): gRPC with mutual TLS for the broker only,
//	                  its own Redis, ratchets sealed by Vault Transit, identity in Vault
//	                  Transit; it has no NATS flag and no NATS credentials at all
//	pps keys garbler  write a local garbler identity key and print its public key (hex), the
//	                  key devices pin (D20)
//	pps probe         Kubernetes exec probe: GET <path> on the address in OBSCURA_ADDR_FILE
//
// Every flag has an environment fallback OBSCURA_<FLAG> (dashes become underscores); secrets
// come from files or Vault, never from flags or variables. A configuration error (a bad flag,
// a malformed environment value, an invalid setting, an unreadable key or certificate) exits
// with status 2.
package main

import "github.com/obscura-iot/obscura/services/pkg/daemon"

func main() {
	daemon.Main("pps", []daemon.Command{
		{Name: "garbler", Run: runGarbler},
		{Name: "broker", Run: runBroker},
		{Name: "keys", Run: runKeys},
		{Name: "probe", Run: daemon.RunProbe},
	})
}
