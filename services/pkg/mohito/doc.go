// Package mohito is the protocol core of Mohito, the metadata-hiding command
// and response layer between users, one integrator, vendor back-ends and their
// devices (spec shared/specs/mohito.md; paper "Scalable Metadata-Hiding for
// Privacy-Preserving IoT Systems"). It implements device setup and ephemeral
// ids (spec §3.4, §3.6 C1), the user's onion-wrapped fixed-size submission
// (M1, HPKE RFC 9180 through crypto/hpke with an X25519 or MLKEM768-X25519
// suite), one-hot vendor shares in the Goldilocks field, the shuffler
// (§3.6 C4, §3.8), the integrator's stages (§3.6 C5, §4.5), vendor decoding and
// response encoding (§3.6 C6, §3.7) and the device, as stage functions over
// batches with no transport inside: services wire them to NATS, Redis and
// Kubernetes. Every envelope has a fixed size given the round parameters, and
// every parser of network bytes returns a sentinel error instead of panicking.
//
// It takes these [R] decisions of spec §8 by default: G1 (per-command
// response keys k_I^resp, k_V*^resp; the server response layers are XSalsa20
// keystreams that cannot fail, so fake and real positions are processed
// identically); G2 (the a, c = a² one-hot validity check between integrator
// and shuffler in F_p, p = 2^64 − 2^32 + 1, run before X₁ and X₂ are summed;
// x₁ is a 32-byte PRG seed, O8); G3 (secret per-round C_v = base_v + δ +
// U{0..w_v}, per-vendor OKVS padding to public capacities K_v); G4 (a 256-bit
// device secret from which k_D^prf and k_D^ae are derived with HKDF under
// separate labels — the vendor only ever receives k_D^prf); G5 (burst excess
// S reported as a metric); G6 (vendor response OKVS padded to a coarse public
// capacity); G7 (the shuffler releases nothing before the round is finished,
// enforced by ErrRoundOpen; fakes come from a pre-generated pool); O5 (the
// command layout with zero padding), O6 (duplicate z replaced by a random
// key), O14 (device replay window and AEAD bound to z), O15 (asynchronous
// responses of App. A within a window of W rounds, AsyncWindow; W = 0 is the
// synchronous protocol unchanged: every active device sends W·q late records
// every round, every vendor one late OKVS of fixed shape, the integrator
// decodes every position of every retained round and sends an M11L to every
// user of it, and I and V* keep slots, π, the fake set and the response keys
// for W rounds in LateResponses, then zero and drop them; late keystreams
// carry the lag in the nonce so no key is used twice) and O16 as far as it
// concerns this path (the late path uses no private key, so no old key epoch
// has to be kept for it). Params.ResponseMode = ResponsePaperLiteral
// reproduces the paper's authenticated public-key response layers for
// benchmarks only: it leaks the real per-vendor counts to the integrator (G1),
// has no wire form and must never be used in production.
package mohito
