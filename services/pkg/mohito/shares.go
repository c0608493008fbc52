package mohito

import (
	"encoding/binary"
	"fmt"
	"io"
)

// ShareSeed is the integrator's share x₁ of the one-hot vector e_v, compressed
// to a 32-byte PRG seed (spec O8). It expands to x₁ ∈ F_p^|𝒱| and to the
// integrator's shares a₁, c₁ of the validity-check mask (spec G2).
type ShareSeed [SeedSize]byte

// Share is one party's additive share of (e_v, a, c = a²) in F_p.
type Share struct {
	X    []Elem // share of e_v, one element per vendor
	A, C Elem   // shares of the check mask a and of c = a²
}

const (
	prgShare byte = 1
	prgCheck byte = 2
)

// Expand derives the integrator's share (x₁, a₁, c₁) from the seed.
func (s *ShareSeed) Expand(vendors int) Share {
	buf := make([]Elem, vendors+2)
	seed := [32]byte(*s)
	expandElems(buf, &seed, prgShare)
	return Share{X: buf[:vendors:vendors], A: buf[vendors], C: buf[vendors+1]}
}

// SplitOneHot secret-shares e_v (the client side of spec §3.6 C1 step 3 plus
// the G2 mask): it returns the integrator's seed and the shuffler's explicit
// share (x₂, a₂, c₂) with x₁ + x₂ = e_v, a₁ + a₂ = a, c₁ + c₂ = a².
func SplitOneHot(v, vendors int, rand io.Reader) (ShareSeed, Share, error) {
	if v < 0 || v >= vendors {
		return ShareSeed{}, Share{}, fmt.Errorf("%w: vendor %d of %d", ErrParams, v, vendors)
	}
	x := make([]Elem, vendors)
	x[v] = 1
	return splitVector(x, rand, false)
}

// splitVector shares an arbitrary vector. With badMask the shared c is not a²
// (used by tests to model malicious clients).
func splitVector(x []Elem, rand io.Reader, badMask bool) (ShareSeed, Share, error) {
	var seed ShareSeed
	var ab [32]byte
	if _, err := io.ReadFull(rand, seed[:]); err != nil {
		return seed, Share{}, fmt.Errorf("sample share seed: %w", err)
	}
	if _, err := io.ReadFull(rand, ab[:]); err != nil {
		return seed, Share{}, fmt.Errorf("sample check mask: %w", err)
	}
	a := reduce128(binary.BigEndian.Uint64(ab[:]), binary.BigEndian.Uint64(ab[8:]))
	c := a.Square()
	if badMask {
		c = c.Add(1)
	}
	s1 := seed.Expand(len(x))
	s2 := Share{X: make([]Elem, len(x)), A: a.Sub(s1.A), C: c.Sub(s1.C)}
	for i := range x {
		s2.X[i] = x[i].Sub(s1.X[i])
	}
	return seed, s2, nil
}

// size is the wire size of a share of n vendors.
func shareSize(vendors int) int { return ElemSize * (vendors + 2) }

// putShare writes x ‖ a ‖ c.
func putShare(b []byte, s *Share) {
	for i, e := range s.X {
		PutElem(b[ElemSize*i:], e)
	}
	n := len(s.X)
	PutElem(b[ElemSize*n:], s.A)
	PutElem(b[ElemSize*(n+1):], s.C)
}

// parseShare reads a share of n vendors; every element must be canonical.
func parseShare(b []byte, vendors int) (Share, error) {
	if len(b) != shareSize(vendors) {
		return Share{}, ErrSize
	}
	all := make([]Elem, vendors+2)
	for i := range all {
		e, err := ReadElem(b[ElemSize*i:])
		if err != nil {
			return Share{}, err
		}
		all[i] = e
	}
	return Share{X: all[:vendors:vendors], A: all[vendors], C: all[vendors+1]}, nil
}

// CheckSeed is the shuffler's fresh per-round randomness for the G2 check,
// sampled only after the round is closed (after every share is fixed).
type CheckSeed [SeedSize]byte

// CheckVector is r ∈ F_p^|𝒱| and r_i² expanded from a CheckSeed.
type CheckVector struct {
	r, r2 []Elem
}

// NewCheckVector expands the check seed.
func NewCheckVector(seed *CheckSeed, vendors int) *CheckVector {
	cv := &CheckVector{r: make([]Elem, vendors), r2: make([]Elem, vendors)}
	s := [32]byte(*seed)
	expandElems(cv.r, &s, prgCheck)
	for i, ri := range cv.r {
		cv.r2[i] = ri.Square()
	}
	return cv
}

// CheckOpening is one party's first-round values for one message:
// s_b = Σ x_b,i and Z_b = Σ r_i x_b,i + a_b (both safe to send: x_b is
// uniformly random and Z_b is masked by a_b); ZStar = Σ r_i² x_b,i stays local.
type CheckOpening struct {
	S, Z, ZStar Elem
}

// Open computes the party's opening of its share.
func (cv *CheckVector) Open(sh *Share) CheckOpening {
	var s, z, zs Elem
	for i, x := range sh.X {
		s = s.Add(x)
		z = z.Add(cv.r[i].Mul(x))
		zs = zs.Add(cv.r2[i].Mul(x))
	}
	return CheckOpening{S: s, Z: z.Add(sh.A), ZStar: zs}
}

// CheckW1 is party 1's (the integrator's) second-round value
// w₁ = Z² − 2Z·a₁ + c₁ − z*₁, where Z = Z₁ + Z₂.
func CheckW1(Z Elem, sh *Share, op *CheckOpening) Elem {
	twoZa := Z.Add(Z).Mul(sh.A)
	return Z.Square().Sub(twoZa).Add(sh.C).Sub(op.ZStar)
}

// CheckW2 is party 2's (the shuffler's) second-round value
// w₂ = −2Z·a₂ + c₂ − z*₂.
func CheckW2(Z Elem, sh *Share, op *CheckOpening) Elem {
	twoZa := Z.Add(Z).Mul(sh.A)
	return sh.C.Sub(twoZa).Sub(op.ZStar)
}

// CheckAccept is the G2 decision: s₁ + s₂ = 1 and w₁ + w₂ = 0. A non-one-hot
// vector passes with probability ≤ 2/p.
func CheckAccept(s1, s2, w1, w2 Elem) bool {
	return s1.Add(s2) == 1 && w1.Add(w2) == 0
}
