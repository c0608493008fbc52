// Package lois is the protocol core of LOIS, low-cost packet-header protection for IoT
// devices (Wang, Shi, Zhang, Han, Qian, IoTDI '23), as shared/specs/lois.md gives it. A device
// interface (DI) XORs the source address and port, seq, ack and flags of each IPv4/TCP packet
// with a one-time 128-bit keystream, replaces the service port by one unified port and puts
// the keystream's random 64-bit identifier in a TCP option; the cloud interface (CI) finds the
// keystream by that identifier in a dynamic partial-key Vacuum table (DVT), decrypts the
// source only in memory to pick a backend by 5-tuple and rewrites only the destination; the
// server interface (SI) recovers the header, and hides its replies the same way for the DI.
// Keystreams come in bulk from a seed agreed over an authenticated channel; stochastic traffic
// padding (STP) adds cover packets indistinguishable on the wire. The package holds the pure
// functions every role shares (seed.go, keystream.go, pkvt.go, dvt.go, wire.go, transform.go,
// pool.go, stp.go); transports, registrar and services live elsewhere.
//
// The [R] decisions taken: seed = HKDF-SHA256(r_d ‖ r_c ‖ k_c, "LOIS/v1/seed", session id)
// and one ChaCha20 stream per (direction, SID, epoch) keyed by HKDF-Expand, cut into 24-byte
// segments, id 0 skipped, dup indices skipped (§3.3, D-1–D-5); the option kind 253, length
// 12, ExID 0x4C53, always first at TCP+20 (D-9) and the field map of §3.8 with MASK 0xFF;
// the hardened normalisation of IP ID, TTL, DF, TCP timestamps/SACK and MSS (D-10, D-11);
// SipHash-2-4 with a per-table key for the table hashes (D-8); exact 64-bit lookups by
// default with the paper's 16-bit fingerprints as an option (D-7); delete on use (D-18) and
// tables freed at zero occupancy or expiry + grace, with only the tail taking inserts (D-17);
// download indices partitioned by i mod R across SI replicas (§3.11, D-21); Maglev backend
// choice over the decrypted 5-tuple, identical on every CI replica (D-16); the pad marker
// SYN|FIN|RST inside the encrypted flags (D-26). docs/lois.md describes the rest.
package lois
