package pda

import (
	"crypto/subtle"
	"fmt"
	"io"

	"github.com/cloudflare/circl/group"
)

// Element and Scalar are circl's group interfaces (implemented for ristretto255 by r255.go
// on filippo.io/edwards25519, for P-256 by circl). Elements and scalars of one Group must
// not be mixed with another's. They are exposed so that callers can hold
// keys and intermediate values, but every element or scalar that arrives as bytes must go
// through Group.DecodeElement or Group.DecodeScalar, which enforce the canonical encodings.
type (
	Element = group.Element
	Scalar  = group.Scalar
)

// GroupID names a prime-order group on the wire (PublicParams, Submission header).
type GroupID uint8

const (
	// Ristretto255 is the default group: ristretto255 (RFC 9496) with hash-to-group
	// ristretto255_XMD:SHA-512_R255MAP_RO_ (RFC 9380 §8 / RFC 9496 §4.3.4), 32-byte elements
	// and scalars.
	Ristretto255 GroupID = 1
	// P256 is the spec's §3.9.1 suite: NIST P-256 with P256_XMD:SHA-256_SSWU_RO_ (RFC 9380
	// §8.2) and 33-byte compressed SEC1 elements.
	P256 GroupID = 2
)

// Group is the small abstraction the protocol needs from a prime-order group: canonical
// encodings that reject the identity and anything off the group, hash-to-group and
// hash-to-scalar per RFC 9380, and uniform non-zero scalars drawn from a caller's reader
// (so known-answer tests can run on deterministic randomness).
type Group struct {
	id          GroupID
	g           group.Group
	name        string // RFC 9380 suite id, part of the hash-to-group DST
	elementSize int
	scalarSize  int
	// scalarTopMask clears the bits of the most significant scalar byte that are always
	// zero for a reduced scalar, so rejection sampling accepts with probability ≥ 1/2.
	scalarTopMask byte
	scalarTopByte int // index of the most significant byte in the encoding
}

var (
	// groupRistretto255 is backed by filippo.io/edwards25519 (r255.go, assembly field
	// arithmetic on amd64); groupRistretto255Circl is the same group on circl, bit-for-bit
	// identical (r255_test.go) and kept for the differential tests and benchmarks.
	groupRistretto255 = &Group{
		id: Ristretto255, g: r255Group{}, name: "ristretto255_XMD:SHA-512_R255MAP_RO_",
		elementSize: 32, scalarSize: 32, scalarTopMask: 0x1f, scalarTopByte: 31, // little-endian, ℓ ≈ 2^252
	}
	groupRistretto255Circl = &Group{
		id: Ristretto255, g: group.Ristretto255, name: "ristretto255_XMD:SHA-512_R255MAP_RO_",
		elementSize: 32, scalarSize: 32, scalarTopMask: 0x1f, scalarTopByte: 31,
	}
	groupP256 = &Group{
		id: P256, g: group.P256, name: "P256_XMD:SHA-256_SSWU_RO_",
		elementSize: 33, scalarSize: 32, scalarTopMask: 0xff, scalarTopByte: 0, // big-endian, n ≈ 2^256
	}
)

// NewGroup returns the group with the given id, or ErrUnknownGroup.
func NewGroup(id GroupID) (*Group, error) {
	switch id {
	case Ristretto255:
		return groupRistretto255, nil
	case P256:
		return groupP256, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrUnknownGroup, id)
}

// ID returns the group's wire identifier.
func (g *Group) ID() GroupID { return g.id }

// String returns the RFC 9380 suite name of the group's hash-to-group.
func (g *Group) String() string { return g.name }

// ElementSize is the length of an encoded element: 32 (ristretto255) or 33 (P-256 compressed).
func (g *Group) ElementSize() int { return g.elementSize }

// ScalarSize is the length of an encoded scalar (32 for both groups).
func (g *Group) ScalarSize() int { return g.scalarSize }

// Generator returns a fresh copy of the group generator.
func (g *Group) Generator() Element { return g.g.Generator() }

// NewElement returns a fresh element set to the identity.
func (g *Group) NewElement() Element { return g.g.NewElement() }

// NewScalar returns a fresh scalar set to zero.
func (g *Group) NewScalar() Scalar { return g.g.NewScalar() }

// DecodeElement parses a canonical element encoding. It rejects wrong lengths, the
// identity, encodings of points not in the prime-order group, non-canonical encodings
// (ristretto255: RFC 9496 §4.3.1 decode; P-256: only 0x02/0x03 compressed points with
// x < p that satisfy the curve equation) and never panics.
func (g *Group) DecodeElement(b []byte) (Element, error) {
	if len(b) != g.elementSize {
		return nil, fmt.Errorf("%w: element length %d, want %d", ErrInvalidElement, len(b), g.elementSize)
	}
	if g.id == P256 && b[0] != 0x02 && b[0] != 0x03 {
		// circl also accepts uncompressed and 1-byte identity encodings; only the compressed
		// form is canonical here, so every element has exactly one encoding on the wire.
		return nil, fmt.Errorf("%w: not a compressed point", ErrInvalidElement)
	}
	if g.id == Ristretto255 && !fieldCanonical25519(b) {
		// RFC 9496 §4.3.1 requires rejecting s ≥ p; checked here explicitly rather than
		// relying on the decoder's handling of the top bit.
		return nil, fmt.Errorf("%w: non-canonical field encoding", ErrInvalidElement)
	}
	e := g.g.NewElement()
	if err := e.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidElement, err)
	}
	if e.IsIdentity() {
		return nil, fmt.Errorf("%w: identity", ErrInvalidElement)
	}
	return e, nil
}

// AppendElement appends the canonical encoding of e to dst. The identity has no valid
// encoding in this protocol; encoding it is a programming error reported as an error.
func (g *Group) AppendElement(dst []byte, e Element) ([]byte, error) {
	if e.IsIdentity() {
		return dst, fmt.Errorf("%w: identity", ErrInvalidElement)
	}
	b, err := e.MarshalBinaryCompress()
	if err != nil || len(b) != g.elementSize {
		return dst, fmt.Errorf("%w: encode: %v", ErrInvalidElement, err)
	}
	return append(dst, b...), nil
}

// encodeElement is AppendElement(nil, e) for elements that cannot be the identity except
// with negligible probability or by a bug (fresh re-randomisations, decryptions that were
// checked). It returns nil for the identity so callers can detect it.
func (g *Group) encodeElement(e Element) []byte {
	b, err := g.AppendElement(make([]byte, 0, g.elementSize), e)
	if err != nil {
		return nil
	}
	return b
}

// DecodeScalar parses a canonical scalar encoding (little-endian for ristretto255,
// big-endian for P-256, always < the group order). Zero is accepted; use
// DecodeNonZeroScalar for keys.
func (g *Group) DecodeScalar(b []byte) (Scalar, error) {
	if len(b) != g.scalarSize {
		return nil, fmt.Errorf("%w: scalar length %d, want %d", ErrInvalidScalar, len(b), g.scalarSize)
	}
	s := g.g.NewScalar()
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidScalar, err)
	}
	// Defence in depth (both backends already reject scalars ≥ the order on unmarshal):
	// a re-encoding that differs means the input was not canonical.
	re, err := s.MarshalBinary()
	if err != nil || subtle.ConstantTimeCompare(re, b) != 1 {
		return nil, fmt.Errorf("%w: not canonical", ErrInvalidScalar)
	}
	return s, nil
}

// DecodeNonZeroScalar is DecodeScalar that also rejects zero (keys, dedup tags).
func (g *Group) DecodeNonZeroScalar(b []byte) (Scalar, error) {
	s, err := g.DecodeScalar(b)
	if err != nil {
		return nil, err
	}
	if s.IsZero() {
		return nil, fmt.Errorf("%w: zero", ErrInvalidScalar)
	}
	return s, nil
}

// AppendScalar appends the canonical encoding of s to dst.
func (g *Group) AppendScalar(dst []byte, s Scalar) []byte {
	b, err := s.MarshalBinary()
	if err != nil || len(b) != g.scalarSize {
		// circl's scalars always marshal to ScalarSize bytes; keep the format fixed anyway.
		return append(dst, make([]byte, g.scalarSize)...)
	}
	return append(dst, b...)
}

// RandomScalar draws a uniform non-zero scalar from rand by rejection sampling, so that a
// deterministic reader gives deterministic scalars (circl's ristretto255 RandomScalar
// ignores its reader). It fails only if rand fails.
func (g *Group) RandomScalar(rand io.Reader) (Scalar, error) {
	var buf [32]byte
	for range 256 { // each try succeeds with probability ≥ 1/2
		if _, err := io.ReadFull(rand, buf[:g.scalarSize]); err != nil {
			return nil, fmt.Errorf("pda: read randomness: %w", err)
		}
		buf[g.scalarTopByte] &= g.scalarTopMask
		s, err := g.DecodeNonZeroScalar(buf[:g.scalarSize])
		if err == nil {
			return s, nil
		}
	}
	return nil, ErrRandomness
}

// HashToElement is the RFC 9380 hash_to_curve (random-oracle variant) of the group with
// the given DST.
func (g *Group) HashToElement(msg, dst []byte) Element { return g.g.HashToElement(msg, dst) }

// HashToScalar is RFC 9380 hash_to_field into the scalar field with the given DST.
func (g *Group) HashToScalar(msg, dst []byte) Scalar { return g.g.HashToScalar(msg, dst) }

// mulCounts tallies scalar multiplications for the benchmarks' per-key counts. It is nil
// outside single-threaded benchmarks, so production pays one predictable branch.
type mulCounts struct{ variable, fixed, table, msm int }

var countMuls *mulCounts

// mul returns s·e as a new element (constant time in s).
func (g *Group) mul(e Element, s Scalar) Element {
	if countMuls != nil {
		countMuls.variable++
	}
	return g.g.NewElement().Mul(e, s)
}

// mulGen returns s·G as a new element.
func (g *Group) mulGen(s Scalar) Element {
	if countMuls != nil {
		countMuls.fixed++
	}
	return g.g.NewElement().MulGen(s)
}

// add returns a+b as a new element.
func (g *Group) add(a, b Element) Element { return g.g.NewElement().Add(a, b) }

// fieldCanonical25519 reports whether the 32-byte little-endian b is < p = 2^255 − 19.
func fieldCanonical25519(b []byte) bool {
	if b[31] != 0x7f {
		return b[31] < 0x7f
	}
	for i := 30; i >= 1; i-- {
		if b[i] != 0xff {
			return true
		}
	}
	return b[0] < 0xed
}
