// Package pps is the protocol core of Secure Publish-Process-Subscribe
// (shared/specs/publish-process-subscribe.md): publishers' wire labels derived from a
// forward-secure hash ratchet (§3.3, §8.1–§8.2), the wire-label consistency check between
// Broker and Garbler (§3.4, §8.4), nullification of missing and inconsistent publishers
// (§2.4, §8.8), function key epochs and the subscriber's unmasking (§3.7, §8.7), the setup
// key exchange (§3.11, §8.9) and Q24.8 fixed point (§4). It has no NATS, Redis or Kubernetes
// import: the roles wire it to the network, gc garbles, and pps/dsl compiles functions.
//
// Decisions taken: PRG = ChaCha20-IETF keystream with libsodium's "LibsodiumDRG" nonce,
// PRF = keyed BLAKE2b-256 and crypto_kx session keys, all checked against vectors computed
// by libsodium itself (D6, testdata/libsodium_vectors.py); the PRG restarts per round seed
// and lsb(w1) = ¬lsb(w0) selects identity-gate rows (D2, D5); Q24.8 with wrapping add,
// floor-shift multiply and restoring divide (D1); seeds retained only in a bounded cache
// erased on Release (D8); the consistency check is an RFC 9497 OPRF-PSI on ristretto255
// (circl) in which only the Broker learns the intersection (D16a); nullified slots get their
// declared identity and every slot a validity bit, with minInputs giving ⊥ (D12); revoking
// a subscriber starts a new function key epoch granted only to the others (D14); function
// rounds are allocated once and never reused (D22, §10 #7).
package pps
