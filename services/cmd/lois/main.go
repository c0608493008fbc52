// Command lois runs the LOIS packet-header protection interfaces (shared/specs/lois.md §3.9,
// §10) on the emulated wire: one UDP datagram per transformed IPv4 packet.
//
//	lois di         device interface: a TUN device in its network namespace; packets to the
//	                cloud address are hidden and sent to the CI, downloads recovered to the TUN
//	lois ci         cloud interface: lookup, source recovered in memory only, destination
//	                rewritten, forwarded to the SI serving the chosen backend
//	lois si         server interface: uploads recovered to its TUN towards the real server,
//	                the server's replies hidden and sent straight to the DI
//	lois provision  the registrar step done ahead of time: a fresh session's per-role keys
//	                files (the seed is never written)
//	lois register   the registrar step over JetStream: publish a session record, wait for
//	                the replicas' install acks, then write the device's keys file
//	lois registrar  the registrar daemon: HELLO, EPOCH_REQ and the SIs' low-water events over
//	                NATS, every session and epoch installed at the replicas before the device
//	                gets it; sessions kept with their seeds wrapped by Vault Transit
//	lois hello      a device's HELLO to the registrar daemon: writes its keys file
//	lois probe      Kubernetes exec probe: GET <path> on the address in OBSCURA_ADDR_FILE
//
// Every flag has an environment fallback OBSCURA_<FLAG>; keys come from files only. A
// configuration error (a bad flag, an invalid setting, an unreadable keys file) exits with
// status 2.
package main

import "github.com/obscura-iot/obscura/services/pkg/daemon"

func main() {
	daemon.Main("lois", []daemon.Command{
		{Name: "di", Run: runDI},
		{Name: "ci", Run: runCI},
		{Name: "si", Run: runSI},
		{Name: "provision", Run: runProvision},
		{Name: "register", Run: runRegister},
		{Name: "registrar", Run: runRegistrar},
		{Name: "hello", Run: runHello},
		{Name: "probe", Run: daemon.RunProbe},
	})
}
