// Package pda is the cryptographic core of privacy-preserving data aggregation
// (Ringberg et al., "Collaborative, Privacy-Preserving Data Aggregation at Scale") in the
// production instantiation of shared/specs/pda.md §3.9, "encrypted 2HashDH" (EOPRF-DH), as
// plain Go over batches with no transport. A Participant canonicalises each key (U6: Key,
// IPKey, DomainKey, URLKey, StringKey), encrypts P = H2G(window‖canon(k)) under h_DB, the
// embedded key (§3.9.3) under the product key h_DB·h_PRX and, when values are used, g^v,
// and proves knowledge of all randomness with a Fiat–Shamir multi-Schnorr proof plus a CDS
// OR-proof for v ∈ D, bound to (params digest ⊇ deployment and window, session, index)
// (§3.9.4). The Proxy verifies, raises E_DB(P) to its OPRF key s, re-randomises every
// ciphertext including the inner layer with the product key, attaches the dedup tag
// E_DB(Y^{t_j}) and emits a BlindedItem with no participant identity; Shuffle is the
// mixer's permutation. The DB front-end opens items into Entries (Y, Z, v, E_PRX(k),
// entry_id) routed by KeyPosition and the ring subpackage (§4.3); a Table (one shard)
// counts with per-participant tags, applies f = "≥ τ", and builds RevealRequests that the
// DB re-randomises under h_PRX and reorders afresh; the proxy's Oracle decrypts, checks
// F_s(k') = Y per entry (§3.3, §3.9.5) and returns the key and a consistency bitmap, and
// the Table prunes, re-evaluates f and publishes (k, T[k]) (release variant V2). Every
// decoder of network bytes (ParseSubmission, ParseBlindedItem, ParseEntry,
// ParseRevealRequest, ParseRevealResponse, PublicParams.UnmarshalBinary,
// ParseCanonicalKey, Group.DecodeElement/DecodeScalar) returns sentinel errors and never
// panics; all formats are fixed-size per deployment (wire.go).
//
// [R] decisions taken here. The default group is ristretto255 (RFC 9496) with
// hash_to_ristretto255 (RFC 9380 / RFC 9496 §4.3.4); P-256 with P256_XMD:SHA-256_SSWU_RO_
// is the configurable alternative. ristretto255 runs on filippo.io/edwards25519 (r255.go:
// RFC 9496 encode/decode/MAP on its field, whose multiplication has amd64 assembly, and its
// constant-time ScalarMult and table-based ScalarBaseMult); P-256 runs on cloudflare/circl.
// circl's ristretto255 stays in the package as a second backend: the RFC 9380, 9496 and 9497
// vectors (testdata/) and the known-answer transcripts pass through our Group wrapper on
// both, and a differential test pins them to identical bytes (r255_test.go). The spec's security argument
// (§8.2) needs only a prime-order group in which DDH is hard plus random oracles for H2G
// and Fiat–Shamir; ristretto255 is exactly a prime-order group (the cofactor of
// edwards25519 is quotiented out, and its encoding admits no small-order or non-canonical
// points), so the default changes nothing in that argument. The only group-specific part
// is the key embedding: ristretto255 has no standard one, so we use a try-and-increment
// over canonical encodings (ctrLo‖chunk(30)‖ctrHi, ≈ 1/4 success per try, 16k tries),
// which is public and deterministic and has no security impact (§8.2 d); P-256 follows
// §3.9.3 exactly. Further: the s₀ term of Naor–Reingold is moot because reference mode
// (NR + IKNP) is not implemented; count mode defaults to distinct participants (U9) with
// first-write-wins on tags, tuples mode keys entries by the DB-side entry id so redelivery
// is idempotent either way; reveal requests carry only window, a fresh random request id,
// Y and DB-re-randomised ciphertexts in a fresh order (never entry ids, tags, values or
// anything the proxy forwarded) and the oracle refuses requests with fewer than τ entries
// (U24); URL canonicalisation drops the fragment and rejects user information; Key.String
// never prints key material. Fixed-base multiplications by public keys on ristretto255 use
// a constant-time signed-window comb table of affine Niels points (comb.go), because the
// libraries precompute only for the generator.
//
// Batch verification (proof.go, msm.go). Proofs are sent as (commitments R, responses z)
// (submission format 2), so each check is a linear equation E = identity in public
// elements, and the proxy checks a submission batch with Σ w_k·E_k = identity for
// independent weights w_k uniform in [1, 2^128) from crypto/rand, drawn after all proofs
// are received, in one variable-time multi-scalar multiplication (public inputs only). In a
// prime-order group (ristretto255; P-256 has cofactor 1), if some E_k ≠ identity then for
// any fixed values of the other weights at most one w_k mod ℓ makes the sum vanish, and
// w_k ≠ 0 with ℓ > 2^128, so a batch containing a false equation passes with probability
// ≤ 1/(2^128 − 1), including forgeries crafted to cancel one another (they are fixed
// before the weights). The challenge e = H2S(params digest ‖ session ‖ index ‖ ciphertexts
// ‖ R) is unchanged in what it binds (T-MAL-6); the (R, z) form is the same sigma protocol
// with the same special soundness and zero knowledge as (e, z), and commitments are
// canonical non-identity encodings.
//
// If the batch check fails, every proof of the batch is verified on its own, exactly and
// without randomness, so a bad item rejects only itself and is reported at its position;
// the outcome equals per-item verification (TestBatchAgreesWithSingle). A participant that
// includes a bad proof pays for its own batch's fallback only (the per-item cost, as
// before batching). P-256 verifies per item: circl's P-256 additions make an MSM slower.
// Residual risk, as in the spec (§2.6 #2, T-MAL-9): exponent malleability
// (submitting H(k)^c) by a participant colluding with the DB is not prevented
// cryptographically; the junk row it creates never passes the consistency check.
package pda
