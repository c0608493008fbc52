// Package sddr is the protocol core of SDDR, secure device discovery and recognition (Lentz,
// Erdélyi, Aditya, Shi, Druschel, Bhattacharjee, USENIX Security 2014), as
// shared/specs/sddr.md gives it. Each device rotates an X25519 key pair and a random radio
// address together every epoch (15 min plus jitter, unsynchronised) and, each discovery
// interval, installs a 240-byte beacon: its public key, a counter and a Bloom filter of its
// advertised link values salted with key and counter, padded to a constant load. A receiver
// derives with every sender a link identifier L = H0(pk_lo ‖ pk_hi ‖ dhk), the encounter key
// sk = H2(L) and the public encounter id H_eid(L)[:16], and recognises friends by testing its
// listen links against the filter, keeping only those that match every later beacon of the
// sender's epoch. Revoking a friend removes one link value from the advertised set; nobody
// else is re-keyed. The package holds the pure engine (Device), the frame and message codecs
// and the energy model of §5.5; radios, simulator and the rendezvous mailbox live elsewhere.
//
// The [R]/[REC] decisions taken: the x25519 profile only (no maintained Go library offers
// P-192 ECDH, and NIST disallows it for key agreement; §7 item 1); SHA-256 with the domain tags
// SDDR-v1/H0…/CONFIRM (item 2); N = 256, K = 4, M = 1632 with [R]'s LE32-word index rule (item
// 3); salt = pk ‖ count byte (item 4); the byte-aligned SDDR-v1 frame, also the AdvData of a
// BLE 5 extended advert (item 5, §3.11); 32-byte link values, weak ones refused (item 8); peer
// state keyed by public key (item 9); 15 min + U[0, 60 s) epochs (item 10); the advertised set
// snapshot per epoch with RevokeNow forcing a rotation (items 11, §3.12); Recognized at P_fp^n
// ≤ min(1e-3, 0.05/|LS|) (item 12); explicit Confirm tags at epoch boundaries and the hardened
// Verify message (items 13, 21); erasure of the exponent and DH secrets at epoch end (item 15);
// an error above N advertised links (item 16); crypto/rand unless a test injects a stream
// (item 17); own and duplicate beacons dropped and at most 255 new peers per inquiry (items
// 19, 20); listen changes applied at once (item 23); early rotation at the count cap (item 26).
// docs/sddr.md describes the rest.
package sddr
