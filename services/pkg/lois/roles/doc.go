// Package roles runs the LOIS interfaces on a real packet path (shared/specs/lois.md §3.9,
// §10): the device interface (DI) reads the device's packets from a TUN device, hides them
// and sends them to the cloud interface (CI) over the emulated wire — one UDP datagram per
// LOIS packet, its payload the exact transformed IPv4 packet; the CI looks the id up,
// recovers the source in locals only, rewrites the destination and forwards to a server
// interface (SI); the SI recovers the packet and writes it to its own TUN towards the real
// server, and hides the server's replies, which go straight back to the DI (direct server
// return, not through CI).
//
// Keys come from keys files (package contract) written by the registrar step `lois
// provision`: each role holds only the streams it needs, never the seed (D-6). Rejections are
// counted by reason (contract.Result*); a replay is told apart from an unknown id by a small
// direct-mapped cache of ids this role consumed recently.
package roles
