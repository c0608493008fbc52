// Package okvs implements Mohito's oblivious key-value store: PaXoS, the 2-hash garbled
// cuckoo table of Pinkas–Rosulek–Trieu–Yanai (EUROCRYPT 2020) with the dense extension of
// GPRTY21, as the Mohito spec (shared/specs/mohito.md) gives it in §4.2. Encode turns n
// (key, value) pairs into a table of m = m′ + d + λ cells of the value length ℓ. Each key
// hashes to one cell in each half of the m′ sparse cells and to a random row r(k) over the
// d + λ dense cells, and Decode(k) = D[h₁(k)] ⊕ D[h₂(k)] ⊕ ⟨r(k), D_dense⟩. Encoding peels
// the cuckoo graph, solves its 2-core (spanning trees, then Gauss–Jordan elimination over
// GF(2) on the dense cells) and back-substitutes in reverse peeling order. Every cell that no
// equation determines is uniformly random, so a key that was not encoded decodes to
// random-looking bytes, and when the values are ciphertexts the table hides its keys (spec
// §4.1, §4.3): a vendor can decode at every ephemeral id without learning which ids carried
// commands.
//
// The [R] decisions of §4.2 taken here: m′ = ⌈2.4n⌉ split into halves of ⌈m′/2⌉ and ⌊m′/2⌋,
// d = ⌈log₂ n⌉ + 8 and λ = 40 (SparseFactorNum/Den, DenseSlack, Lambda); H(seed, k) =
// SHA-256(seed ‖ k) with a fresh 16-byte seed per table, carried in the header (marshal.go
// has the format). SHA-256 is kept rather than a faster keyed hash because the spec fixes it
// for every implementation (a vendor's decoder in another language must agree bit for bit),
// and with SHA-NI it is cheap: we measured 85 ns per 32-byte key against 57 ns for AES-CMAC
// through crypto/aes, which has no multi-block path for independent inputs; the difference is
// a few percent of a 1 KiB decode. The random fill is the AES-256-CTR keystream of a 32-byte
// key read from the caller's rand on each attempt, because crypto/rand delivers about
// 0.6 GB/s and a table of 100k × 1 KiB values is 240 MiB; it is written before solving, so
// no cell is ever left zero (§4.2 step 6). An attempt fails when the 2-core has more than d
// independent cycles or its dense system is rank-deficient; Encode then retries with a fresh
// seed, at most MaxAttempts times (spec O7). Equal keys are rejected with ErrDuplicateKey:
// replacing a duplicate by a random key so the size is unchanged (spec O6) is the caller's
// job. The 3-hash garbled cuckoo table and band (RB-)OKVS, which would roughly halve the
// bandwidth (§4.2, optional), were neither implemented nor measured.
package okvs
