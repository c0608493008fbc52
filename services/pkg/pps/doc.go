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
//
// Mode Hardened is the input mode H1 of D21 (hardened.go), which closes the publisher–Broker
// collusion of §2.6.1: a publisher sends y = x ⊕ m, m the 32-bit word of
// PRG(PRF(s_k, "pps/v1/h1-mask")), and the Broker gets the label of each bit of y from the
// Garbler by correlated OT extension (package ot, Broker = receiver), the Garbler swapping
// each pair by the bit of m so that the Broker's label is the label of x. No publisher knows
// a label, so there is no consistency check; gc hides its Δ (D22), so the OT pairs still
// enter through identity gates. collusion_test.go shows the leak in faithful mode and its
// absence in H1.
package pps
