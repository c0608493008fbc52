// Package ot is oblivious transfer for the hardened input mode H1 of PPS
// (shared/specs/publish-process-subscribe.md, §3.8 and D21): κ = 128 base OTs by the
// Chou–Orlandi "simplest OT" (LATINCRYPT 2015) on ristretto255 (circl), extended to any
// number of 1-out-of-2 OTs of 128-bit strings by IKNP (Ishai–Kilian–Nissim–Petrank, CRYPTO
// 2003), in three flavours: random OT, correlated OT (the sender's pairs are (m0, m0⊕Δ) for
// a Δ it picks, which is what free-XOR input labels need, at 16 B per OT) and chosen-message
// OT (32 B per OT). The Sender is the Garbler, the Receiver the Broker. There is no network
// here: each side is a state machine that turns one message into the next, and every
// message has MarshalBinary and a length-checked UnmarshalBinary (messages.go), so the
// services can carry them over gRPC.
//
// Decisions taken. The extension is the semi-honest IKNP of the spec's threat model (§2.3:
// Broker and Garbler are honest-but-curious); the KOS15/ALSZ consistency check against a
// malicious receiver is not done, so a Broker that sends inconsistent columns can learn bits
// of the sender's secret s — use this package only where the receiver is semi-honest. The
// correlation-robust hash is H(x, j) = π(σ(x) ⊕ j) ⊕ σ(x) with σ(lo‖hi) = (hi ‖ lo⊕hi) and π
// AES-128 under a key fixed per session from the base-OT transcript (Guo–Katz–Wang–Yu, S&P
// 2020, where this MMO^σ construction is tweakable circular correlation robust and so
// tweakable correlation robust, which semi-honest IKNP needs); the tweak j is the OT's
// index in the session, so no tweak repeats within a session. The column PRG is AES-128-CTR
// keyed by each base-OT key with the counter at the batch's offset, so batches of one
// session run in order without state beyond an offset, and a batch is padded to a multiple
// of 128 OTs. Base-OT keys are SHA-256 of the whole base-OT transcript entry (session, index,
// A, B_i, the shared point), and points that decode to the identity are rejected.
package ot
