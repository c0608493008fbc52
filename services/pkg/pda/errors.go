package pda

import "errors"

// Sentinel errors. Every decoder of network bytes returns one of these (wrapped with
// context) instead of panicking; services branch on them with errors.Is and count them.
var (
	// ErrUnknownGroup: a group id that is neither Ristretto255 nor P256.
	ErrUnknownGroup = errors.New("pda: unknown group")
	// ErrInvalidElement: wrong length, identity, off-group or non-canonical element.
	ErrInvalidElement = errors.New("pda: invalid group element")
	// ErrInvalidScalar: wrong length, non-canonical (≥ order) or, where forbidden, zero scalar.
	ErrInvalidScalar = errors.New("pda: invalid scalar")
	// ErrMalformed: a message that does not parse under the deployment's fixed format
	// (wrong version, group, flags, chunk count or length).
	ErrMalformed = errors.New("pda: malformed message")
	// ErrInvalidParams: PublicParams that are inconsistent or out of range.
	ErrInvalidParams = errors.New("pda: invalid public parameters")
	// ErrInvalidKey: a key that cannot be canonicalised (bad address, URL, domain, length).
	ErrInvalidKey = errors.New("pda: invalid key")
	// ErrKeyTooLong: a canonical key longer than the deployment's E_PRX payload
	// (n_chunks × chunk size − 2 bytes, spec U7).
	ErrKeyTooLong = errors.New("pda: key too long for the deployment's chunk count")
	// ErrValueNotInDomain: a value outside D (participant side), or a decrypted value that is
	// not g^v for any v ∈ D (DB side, spec T-MAL-4).
	ErrValueNotInDomain = errors.New("pda: value not in domain")
	// ErrBadProof: the Fiat–Shamir proof does not verify for this context (T-MAL-3, T-MAL-6).
	ErrBadProof = errors.New("pda: proof verification failed")
	// ErrReplay: an item index that was already accepted in this session.
	ErrReplay = errors.New("pda: replayed item")
	// ErrWindowMismatch: a message for another window than the one this party serves.
	ErrWindowMismatch = errors.New("pda: wrong window")
	// ErrEmbedding: a key chunk that cannot be embedded into the group (negligible).
	ErrEmbedding = errors.New("pda: cannot embed key chunk")
	// ErrRandomness: the random source failed.
	ErrRandomness = errors.New("pda: randomness failure")
	// ErrUnknownRequest: a reveal response for a request this table did not issue or
	// already settled.
	ErrUnknownRequest = errors.New("pda: unknown reveal request")
	// ErrRevealRefused: the oracle refuses a request with fewer than τ entries (U24).
	ErrRevealRefused = errors.New("pda: reveal request refused")
)
