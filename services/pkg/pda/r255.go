package pda

import (
	"crypto"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"

	"filippo.io/edwards25519"
	"filippo.io/edwards25519/field"
	"github.com/cloudflare/circl/expander"
	"github.com/cloudflare/circl/group"
	"golang.org/x/crypto/cryptobyte"
)

// r255Group is ristretto255 (RFC 9496) on filippo.io/edwards25519, whose field
// arithmetic has amd64 assembly, behind circl's group.Group interface so that the rest of
// the package is unchanged. It is the default ristretto255 backend; circl's
// group.Ristretto255 (pure-Go go-ristretto field arithmetic) stays selectable for the
// differential tests (r255_test.go), which pin both to the same bytes: encodings,
// hash-to-group (ristretto255_XMD:SHA-512_R255MAP_RO_), hash-to-scalar and decoding
// rejections. Element multiplications by scalars (Mul, MulGen) use the library's
// constant-time paths (ScalarMult, ScalarBaseMult with its precomputed tables); the
// variable-time MSM is the package's own (msm.go), for public inputs only.
type r255Group struct{}

type r255Element struct{ p edwards25519.Point }

type r255Scalar struct{ s edwards25519.Scalar }

var (
	_ group.Group   = r255Group{}
	_ group.Element = (*r255Element)(nil)
	_ group.Scalar  = (*r255Scalar)(nil)
)

// RFC 9496 §4.1 constants.
var (
	r255D              = feDecimal("37095705934669439343138083508754565189542113879843219016388785533085940283555")
	r255SqrtM1         = feDecimal("19681161376707505956807079304988542015446066515923890162744021073123829784752")
	r255SqrtADMinusOne = feDecimal("25063068953384623474111414158702152701244531502492656460079210482610430750235")
	r255InvSqrtAMinusD = feDecimal("54469307008909316920995813868745141605393597292927456921205312896311721017578")
	r255OneMinusDSq    = feDecimal("1159843021668779879193775521855586647937357759715417654439879720876111806838")
	r255DMinusOneSq    = feDecimal("40440834346308536858101042469323190826248399146238708352240133220865137265952")
	feOne              = new(field.Element).One()
	feMinusOne         = new(field.Element).Negate(feOne)
	r255ScalarOrderLE  = mustHex("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
	r255GeneratorPoint = edwards25519.NewGeneratorPoint()
)

func feDecimal(s string) *field.Element {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("pda: bad field constant")
	}
	var le [32]byte
	n.FillBytes(le[:])
	for i := range 16 {
		le[i], le[31-i] = le[31-i], le[i]
	}
	fe, err := new(field.Element).SetBytes(le[:])
	if err != nil {
		panic(err)
	}
	return fe
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// ---- group ----

func (r255Group) String() string { return "ristretto255" }

func (r255Group) Params() *group.Params {
	return &group.Params{ElementLength: 32, CompressedElementLength: 32, ScalarLength: 32}
}

func (r255Group) NewElement() group.Element { return newR255Element() }

func newR255Element() *r255Element {
	e := &r255Element{}
	e.p.Set(edwards25519.NewIdentityPoint())
	return e
}

func (r255Group) NewScalar() group.Scalar { return &r255Scalar{} } // the zero value is 0

func (g r255Group) Identity() group.Element { return newR255Element() }

func (r255Group) Generator() group.Element {
	e := &r255Element{}
	e.p.Set(r255GeneratorPoint)
	return e
}

// RandomElement hashes 64 bytes from rnd to the group (panics if rnd fails, as circl does
// not report reader errors either). Not used by the protocol.
func (r255Group) RandomElement(rnd io.Reader) group.Element {
	var b [64]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		panic(err)
	}
	e := &r255Element{}
	e.fromUniformBytes(&b)
	return e
}

// RandomScalar reduces 64 bytes from rnd (panics if rnd fails). The protocol draws its
// scalars with Group.RandomScalar instead.
func (r255Group) RandomScalar(rnd io.Reader) group.Scalar {
	var b [64]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		panic(err)
	}
	s := &r255Scalar{}
	if _, err := s.s.SetUniformBytes(b[:]); err != nil {
		panic(err)
	}
	return s
}

func (g r255Group) RandomNonZeroScalar(rnd io.Reader) group.Scalar {
	for {
		if s := g.RandomScalar(rnd); !s.IsZero() {
			return s
		}
	}
}

// HashToElement is hash_to_ristretto255 (RFC 9380 Appendix B / RFC 9496 §4.3.4) with
// expand_message_xmd(SHA-512): the sum of the MAPs of the two 32-byte halves of 64
// uniform bytes.
func (r255Group) HashToElement(msg, dst []byte) group.Element {
	var b [64]byte
	copy(b[:], expander.NewExpanderMD(crypto.SHA512, dst).Expand(msg, 64))
	e := &r255Element{}
	e.fromUniformBytes(&b)
	return e
}

func (g r255Group) HashToElementNonUniform(msg, dst []byte) group.Element {
	return g.HashToElement(msg, dst)
}

// HashToScalar reduces 64 bytes of expand_message_xmd(SHA-512) modulo ℓ (RFC 9497 §4.1).
func (r255Group) HashToScalar(msg, dst []byte) group.Scalar {
	s := &r255Scalar{}
	if _, err := s.s.SetUniformBytes(expander.NewExpanderMD(crypto.SHA512, dst).Expand(msg, 64)); err != nil {
		panic(err) // Expand returned 64 bytes
	}
	return s
}

// ---- elements ----

func toR255E(x group.Element) *r255Element {
	e, ok := x.(*r255Element)
	if !ok {
		panic(group.ErrType)
	}
	return e
}

func toR255S(x group.Scalar) *r255Scalar {
	s, ok := x.(*r255Scalar)
	if !ok {
		panic(group.ErrType)
	}
	return s
}

func (e *r255Element) Group() group.Group { return r255Group{} }

func (e *r255Element) String() string {
	b, _ := e.MarshalBinary()
	return fmt.Sprintf("%x", b)
}

// equal is the RFC 9496 §4.5 equality: X1·Y2 = Y1·X2 or Y1·Y2 = X1·X2 (constant time).
func (e *r255Element) equal(x *r255Element) int {
	X1, Y1, _, _ := e.p.ExtendedCoordinates()
	X2, Y2, _, _ := x.p.ExtendedCoordinates()
	var a, b field.Element
	a.Multiply(X1, Y2)
	b.Multiply(Y1, X2)
	r := a.Equal(&b)
	a.Multiply(Y1, Y2)
	b.Multiply(X1, X2)
	return r | a.Equal(&b)
}

// IsIdentity: the representatives of the identity are exactly the points with X = 0 or
// Y = 0 (equality with (0, 1, 1, 0)).
func (e *r255Element) IsIdentity() bool {
	X, Y, _, _ := e.p.ExtendedCoordinates()
	var zero field.Element
	return X.Equal(&zero)|Y.Equal(&zero) == 1
}

func (e *r255Element) IsEqual(x group.Element) bool { return e.equal(toR255E(x)) == 1 }

func (e *r255Element) Set(x group.Element) group.Element {
	e.p.Set(&toR255E(x).p)
	return e
}

func (e *r255Element) Copy() group.Element {
	c := &r255Element{}
	c.p.Set(&e.p)
	return c
}

func (e *r255Element) CMov(b int, x group.Element) group.Element {
	if b != 0 && b != 1 {
		panic(group.ErrSelector)
	}
	e.p.Select(&toR255E(x).p, &e.p, b)
	return e
}

func (e *r255Element) CSelect(b int, x, y group.Element) group.Element {
	if b != 0 && b != 1 {
		panic(group.ErrSelector)
	}
	e.p.Select(&toR255E(x).p, &toR255E(y).p, b)
	return e
}

func (e *r255Element) Add(x, y group.Element) group.Element {
	e.p.Add(&toR255E(x).p, &toR255E(y).p)
	return e
}

func (e *r255Element) Dbl(x group.Element) group.Element {
	e.p.Double(&toR255E(x).p)
	return e
}

func (e *r255Element) Neg(x group.Element) group.Element {
	e.p.Negate(&toR255E(x).p)
	return e
}

// Mul is constant time in s (edwards25519 ScalarMult: signed 4-bit windows, constant-time
// table lookups).
func (e *r255Element) Mul(x group.Element, s group.Scalar) group.Element {
	e.p.ScalarMult(&toR255S(s).s, &toR255E(x).p)
	return e
}

// MulGen is constant time in s (ScalarBaseMult with the library's precomputed tables).
func (e *r255Element) MulGen(s group.Scalar) group.Element {
	e.p.ScalarBaseMult(&toR255S(s).s)
	return e
}

func (e *r255Element) MarshalBinary() ([]byte, error) {
	var b [32]byte
	e.encode(&b)
	return b[:], nil
}

func (e *r255Element) MarshalBinaryCompress() ([]byte, error) { return e.MarshalBinary() }

func (e *r255Element) UnmarshalBinary(b []byte) error {
	if len(b) != 32 || !e.decode(b) {
		return group.ErrUnmarshal
	}
	return nil
}

// encode is RFC 9496 §4.3.2.
func (e *r255Element) encode(out *[32]byte) {
	X0, Y0, Z0, T0 := e.p.ExtendedCoordinates()
	var u1, u2, t, invsqrt, den1, den2, zInv, ix0, iy0, enc, x, y, denInv, s field.Element
	u1.Add(Z0, Y0)
	t.Subtract(Z0, Y0)
	u1.Multiply(&u1, &t)
	u2.Multiply(X0, Y0)
	t.Square(&u2)
	t.Multiply(&t, &u1)
	invsqrt.SqrtRatio(feOne, &t)
	den1.Multiply(&invsqrt, &u1)
	den2.Multiply(&invsqrt, &u2)
	zInv.Multiply(&den1, &den2)
	zInv.Multiply(&zInv, T0)
	ix0.Multiply(X0, r255SqrtM1)
	iy0.Multiply(Y0, r255SqrtM1)
	enc.Multiply(&den1, r255InvSqrtAMinusD)
	t.Multiply(T0, &zInv)
	rotate := t.IsNegative()
	x.Select(&iy0, X0, rotate)
	y.Select(&ix0, Y0, rotate)
	denInv.Select(&enc, &den2, rotate)
	t.Multiply(&x, &zInv)
	s.Negate(&y)
	y.Select(&s, &y, t.IsNegative())
	s.Subtract(Z0, &y)
	s.Multiply(&denInv, &s)
	s.Absolute(&s)
	copy(out[:], s.Bytes())
}

// decode is RFC 9496 §4.3.1; it reports false for every invalid encoding (non-canonical
// or negative s, non-square, negative t, y = 0). The identity decodes (s = 0).
func (e *r255Element) decode(in []byte) bool {
	var s field.Element
	if _, err := s.SetBytes(in); err != nil {
		return false
	}
	// SetBytes ignores the top bit and reduces mod p: canonical iff it re-encodes to in.
	canonical := subtle.ConstantTimeCompare(s.Bytes(), in)
	var ss, u1, u2, u2sq, v, t, invsqrt, denX, denY, x, y field.Element
	ss.Square(&s)
	u1.Subtract(feOne, &ss)
	u2.Add(feOne, &ss)
	u2sq.Square(&u2)
	v.Square(&u1)
	v.Multiply(&v, r255D)
	v.Negate(&v)
	v.Subtract(&v, &u2sq)
	t.Multiply(&v, &u2sq)
	_, wasSquare := invsqrt.SqrtRatio(feOne, &t)
	denX.Multiply(&invsqrt, &u2)
	denY.Multiply(&invsqrt, &denX)
	denY.Multiply(&denY, &v)
	x.Multiply(&s, &denX)
	x.Add(&x, &x)
	x.Absolute(&x)
	y.Multiply(&u1, &denY)
	t.Multiply(&x, &y)
	var zero field.Element
	ok := canonical & (1 ^ s.IsNegative()) & wasSquare & (1 ^ t.IsNegative()) & (1 ^ y.Equal(&zero))
	if ok != 1 {
		return false
	}
	if _, err := e.p.SetExtendedCoordinates(&x, &y, feOne, &t); err != nil {
		return false // unreachable for a valid decoding: (x, y) is on the curve
	}
	return true
}

// mapToPoint is the ristretto255 MAP of RFC 9496 §4.3.4 (constant time).
func mapToPoint(t *field.Element) *edwards25519.Point {
	var r, u, v, tmp, s, sPrime, c, N, w0, w1, w2, w3 field.Element
	r.Square(t)
	r.Multiply(&r, r255SqrtM1)
	u.Add(&r, feOne)
	u.Multiply(&u, r255OneMinusDSq)
	tmp.Multiply(&r, r255D)
	v.Subtract(feMinusOne, &tmp)
	tmp.Add(&r, r255D)
	v.Multiply(&v, &tmp)
	_, wasSquare := s.SqrtRatio(&u, &v)
	sPrime.Multiply(&s, t)
	sPrime.Absolute(&sPrime)
	sPrime.Negate(&sPrime)
	s.Select(&s, &sPrime, wasSquare)
	c.Select(feMinusOne, &r, wasSquare)
	N.Subtract(&r, feOne)
	N.Multiply(&N, &c)
	N.Multiply(&N, r255DMinusOneSq)
	N.Subtract(&N, &v)
	w0.Multiply(&s, &v)
	w0.Add(&w0, &w0)
	w1.Multiply(&N, r255SqrtADMinusOne)
	tmp.Square(&s)
	w2.Subtract(feOne, &tmp)
	w3.Add(feOne, &tmp)
	var X, Y, Z, T field.Element
	X.Multiply(&w0, &w3)
	Y.Multiply(&w2, &w1)
	Z.Multiply(&w1, &w3)
	T.Multiply(&w0, &w2)
	p, err := new(edwards25519.Point).SetExtendedCoordinates(&X, &Y, &Z, &T)
	if err != nil {
		panic("pda: ristretto255 map left the curve") // impossible: the map's image is on the curve
	}
	return p
}

// fromUniformBytes is RFC 9496 §4.3.4: MAP of the low 255 bits (mod p) of each half,
// added.
func (e *r255Element) fromUniformBytes(b *[64]byte) {
	var t0, t1 field.Element
	if _, err := t0.SetBytes(b[:32]); err != nil {
		panic(err)
	}
	if _, err := t1.SetBytes(b[32:]); err != nil {
		panic(err)
	}
	e.p.Add(mapToPoint(&t0), mapToPoint(&t1))
}

// ---- scalars ----

func (s *r255Scalar) Group() group.Group { return r255Group{} }

func (s *r255Scalar) String() string { return fmt.Sprintf("%x", s.s.Bytes()) }

func (s *r255Scalar) SetUint64(n uint64) group.Scalar {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(n >> (8 * i))
	}
	if _, err := s.s.SetCanonicalBytes(b[:]); err != nil {
		panic(err)
	}
	return s
}

// SetBigInt sets s = x mod ℓ (variable time, as in circl).
func (s *r255Scalar) SetBigInt(x *big.Int) group.Scalar {
	order := new(big.Int).SetBytes(reverse32(r255ScalarOrderLE))
	m := new(big.Int).Mod(x, order)
	var be [32]byte
	m.FillBytes(be[:])
	if _, err := s.s.SetCanonicalBytes(reverse32(be[:])); err != nil {
		panic(err)
	}
	return s
}

func reverse32(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return r
}

func (s *r255Scalar) IsZero() bool { return s.s.Equal(edwards25519.NewScalar()) == 1 }

func (s *r255Scalar) IsEqual(x group.Scalar) bool { return s.s.Equal(&toR255S(x).s) == 1 }

func (s *r255Scalar) Set(x group.Scalar) group.Scalar {
	s.s.Set(&toR255S(x).s)
	return s
}

func (s *r255Scalar) Copy() group.Scalar {
	c := &r255Scalar{}
	c.s.Set(&s.s)
	return c
}

// CMov goes through the byte encodings with constant-time copies (the library has no
// scalar select); not on a hot path.
func (s *r255Scalar) CMov(b int, x group.Scalar) group.Scalar {
	if b != 0 && b != 1 {
		panic(group.ErrSelector)
	}
	cur := s.s.Bytes()
	subtle.ConstantTimeCopy(b, cur, toR255S(x).s.Bytes())
	if _, err := s.s.SetCanonicalBytes(cur); err != nil {
		panic(err)
	}
	return s
}

func (s *r255Scalar) CSelect(b int, x, y group.Scalar) group.Scalar {
	if b != 0 && b != 1 {
		panic(group.ErrSelector)
	}
	out := toR255S(y).s.Bytes()
	subtle.ConstantTimeCopy(b, out, toR255S(x).s.Bytes())
	if _, err := s.s.SetCanonicalBytes(out); err != nil {
		panic(err)
	}
	return s
}

func (s *r255Scalar) Add(x, y group.Scalar) group.Scalar {
	s.s.Add(&toR255S(x).s, &toR255S(y).s)
	return s
}

func (s *r255Scalar) Sub(x, y group.Scalar) group.Scalar {
	s.s.Subtract(&toR255S(x).s, &toR255S(y).s)
	return s
}

func (s *r255Scalar) Mul(x, y group.Scalar) group.Scalar {
	s.s.Multiply(&toR255S(x).s, &toR255S(y).s)
	return s
}

func (s *r255Scalar) Neg(x group.Scalar) group.Scalar {
	s.s.Negate(&toR255S(x).s)
	return s
}

// Inv sets s = 1/x (0 for x = 0, as circl), constant time.
func (s *r255Scalar) Inv(x group.Scalar) group.Scalar {
	s.s.Invert(&toR255S(x).s)
	return s
}

func (s *r255Scalar) MarshalBinary() ([]byte, error) { return s.s.Bytes(), nil }

// UnmarshalBinary rejects encodings ≥ ℓ (RFC 9496 §4.4), like circl.
func (s *r255Scalar) UnmarshalBinary(b []byte) error {
	if len(b) != 32 {
		return group.ErrUnmarshal
	}
	if _, err := s.s.SetCanonicalBytes(b); err != nil {
		return group.ErrUnmarshal
	}
	return nil
}

func (s *r255Scalar) Marshal(b *cryptobyte.Builder) error {
	b.AddBytes(s.s.Bytes())
	return nil
}

func (s *r255Scalar) Unmarshal(str *cryptobyte.String) bool {
	var b [32]byte
	if !str.CopyBytes(b[:]) {
		return false
	}
	return s.UnmarshalBinary(b[:]) == nil
}
