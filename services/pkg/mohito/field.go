package mohito

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/crypto/chacha20"
)

// Modulus is the Goldilocks prime p = 2^64 − 2^32 + 1 (spec §8.1 G2, O9). The
// share vectors and the one-hot validity check live in F_p so that the check's
// soundness argument (Schwartz–Zippel over a field) holds; 2^64 − p = 2^32 − 1 is
// small, which makes reduction a handful of word operations.
const Modulus uint64 = 0xFFFFFFFF00000001

// epsilon = 2^64 mod p = 2^32 − 1.
const epsilon uint64 = 0xFFFFFFFF

// ElemSize is the wire size of a field element (big-endian, canonical).
const ElemSize = 8

// Elem is an element of F_p in canonical form (0 ≤ e < p). All arithmetic is
// branch-free: shares, a, c and the validity-check values are secret.
type Elem uint64

// NewElem reduces x modulo p.
func NewElem(x uint64) Elem {
	r, b := bits.Sub64(x, Modulus, 0)
	return Elem(ctSelect(b, x, r))
}

// ctSelect returns a if borrow == 1 and b if borrow == 0, without branching.
func ctSelect(borrow, a, b uint64) uint64 {
	m := -borrow
	return (a & m) | (b &^ m)
}

// Add returns a + b mod p.
func (a Elem) Add(b Elem) Elem {
	s, c := bits.Add64(uint64(a), uint64(b), 0)
	r, bb := bits.Sub64(s, Modulus, 0)
	// Use r when the sum overflowed 2^64 (then s − p mod 2^64 is the right value)
	// or when s ≥ p.
	keepS := (1 ^ c) & bb
	return Elem(ctSelect(keepS, s, r))
}

// Sub returns a − b mod p.
func (a Elem) Sub(b Elem) Elem {
	d, bb := bits.Sub64(uint64(a), uint64(b), 0)
	return Elem(d + (Modulus & -bb))
}

// Neg returns −a mod p.
func (a Elem) Neg() Elem { return Elem(0).Sub(a) }

// Mul returns a · b mod p.
func (a Elem) Mul(b Elem) Elem {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return reduce128(hi, lo)
}

// Square returns a² mod p.
func (a Elem) Square() Elem { return a.Mul(a) }

// reduce128 reduces hi·2^64 + lo modulo p using 2^64 ≡ 2^32 − 1 and
// 2^96 ≡ −1 (mod p). Branch-free.
func reduce128(hi, lo uint64) Elem {
	hiHi := hi >> 32
	hiLo := hi & epsilon
	t0, b := bits.Sub64(lo, hiHi, 0)
	// On borrow the machine added 2^64 ≡ ε; take it back. t0 ≥ 2^64 − 2^32 > ε
	// in that case, so this cannot underflow.
	t0 -= epsilon & -b
	t1 := hiLo * epsilon // < 2^64
	t2, c := bits.Add64(t0, t1, 0)
	// On carry the machine dropped 2^64 ≡ ε; add it back. t2 < t1 then, so no
	// second overflow.
	t2 += epsilon & -c
	return NewElem(t2)
}

// Signed interprets e as a signed integer in (−p/2, p/2]; counts such as
// B = C − A are read this way (spec O9).
func (e Elem) Signed() int64 {
	if uint64(e) > Modulus/2 {
		return -int64(Modulus - uint64(e))
	}
	return int64(e)
}

// ElemFromInt maps a small signed integer into F_p.
func ElemFromInt(x int64) Elem {
	if x < 0 {
		return NewElem(uint64(-x)).Neg()
	}
	return NewElem(uint64(x))
}

// PutElem writes e big-endian into b[:8].
func PutElem(b []byte, e Elem) { binary.BigEndian.PutUint64(b, uint64(e)) }

// ReadElem parses a canonical element; non-canonical encodings (≥ p) are
// rejected so that each element has exactly one encoding on the wire.
func ReadElem(b []byte) (Elem, error) {
	x := binary.BigEndian.Uint64(b)
	if x >= Modulus {
		return 0, ErrNonCanonical
	}
	return Elem(x), nil
}

// expandElems fills out with field elements derived from a 32-byte seed and a
// domain label: each element is 16 ChaCha20 keystream bytes reduced mod p
// (statistical distance 2^−64 from uniform, no data-dependent rejection loop).
func expandElems(out []Elem, seed *[32]byte, domain byte) {
	var nonce [12]byte
	nonce[0] = domain
	copy(nonce[1:], "mohito/prg")
	c, err := chacha20.NewUnauthenticatedCipher(seed[:], nonce[:])
	if err != nil {
		panic(err) // unreachable: fixed key and nonce sizes
	}
	var buf [16 * 32]byte
	for len(out) > 0 {
		n := min(len(out), 32)
		clear(buf[:16*n])
		c.XORKeyStream(buf[:16*n], buf[:16*n])
		for i := range n {
			hi := binary.BigEndian.Uint64(buf[16*i:])
			lo := binary.BigEndian.Uint64(buf[16*i+8:])
			out[i] = reduce128(hi, lo)
		}
		out = out[n:]
	}
}
