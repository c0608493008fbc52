package mohito

import (
	"crypto/rand"
	"encoding/binary"
	"math/big"
	mrand "math/rand/v2"
	"testing"
)

var bigP = new(big.Int).SetUint64(Modulus)

func edgeElems() []uint64 {
	return []uint64{0, 1, 2, epsilon, epsilon + 1, 1 << 32, 1 << 63, Modulus - 2, Modulus - 1, Modulus/2 + 1, Modulus / 2}
}

func TestFieldAgainstBig(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	vals := edgeElems()
	for range 2000 {
		vals = append(vals, r.Uint64()%Modulus)
	}
	check := func(op string, got Elem, want *big.Int) {
		t.Helper()
		want.Mod(want, bigP)
		if uint64(got) != want.Uint64() || uint64(got) >= Modulus {
			t.Fatalf("%s: got %d want %s", op, got, want)
		}
	}
	for i, a := range vals {
		b := vals[(i*7+3)%len(vals)]
		ba, bb := new(big.Int).SetUint64(a), new(big.Int).SetUint64(b)
		ea, eb := Elem(a), Elem(b)
		check("add", ea.Add(eb), new(big.Int).Add(ba, bb))
		check("sub", ea.Sub(eb), new(big.Int).Sub(ba, bb))
		check("mul", ea.Mul(eb), new(big.Int).Mul(ba, bb))
		check("neg", ea.Neg(), new(big.Int).Neg(ba))
	}
	for _, x := range []uint64{Modulus, Modulus + 1, ^uint64(0)} {
		check("reduce", NewElem(x), new(big.Int).SetUint64(x))
	}
	// reduce128 over the full 128-bit range.
	for range 2000 {
		hi, lo := r.Uint64(), r.Uint64()
		want := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		want.Add(want, new(big.Int).SetUint64(lo))
		check("reduce128", reduce128(hi, lo), want)
	}
	for _, hi := range []uint64{^uint64(0), 0, epsilon, 1 << 32} {
		for _, lo := range []uint64{^uint64(0), 0, 1} {
			want := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
			check("reduce128 edge", reduce128(hi, lo), want.Add(want, new(big.Int).SetUint64(lo)))
		}
	}
}

func TestSignedRoundTrip(t *testing.T) {
	for _, x := range []int64{0, 1, -1, 147, -147, 1 << 40, -(1 << 40)} {
		if got := ElemFromInt(x).Signed(); got != x {
			t.Fatalf("Signed(ElemFromInt(%d)) = %d", x, got)
		}
	}
}

func TestReadElemRejectsNonCanonical(t *testing.T) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], Modulus)
	if _, err := ReadElem(b[:]); err == nil {
		t.Fatal("accepted p")
	}
	binary.BigEndian.PutUint64(b[:], Modulus-1)
	if e, err := ReadElem(b[:]); err != nil || uint64(e) != Modulus-1 {
		t.Fatal("rejected p-1")
	}
}

func TestSharesReconstruct(t *testing.T) {
	for _, n := range []int{1, 3, 17} {
		for v := range n {
			seed, s2, err := SplitOneHot(v, n, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			s1 := seed.Expand(n)
			for i := range n {
				want := Elem(0)
				if i == v {
					want = 1
				}
				if s1.X[i].Add(s2.X[i]) != want {
					t.Fatalf("n=%d v=%d: x₁+x₂ at %d = %d", n, v, i, s1.X[i].Add(s2.X[i]))
				}
			}
			a := s1.A.Add(s2.A)
			if s1.C.Add(s2.C) != a.Square() {
				t.Fatal("c ≠ a²")
			}
		}
	}
	if _, _, err := SplitOneHot(3, 3, rand.Reader); err == nil {
		t.Fatal("accepted vendor out of range")
	}
}

// runCheck runs the G2 protocol between the two parties for one shared vector.
func runCheck(t *testing.T, seed ShareSeed, s2 Share, n int) bool {
	t.Helper()
	var cs CheckSeed
	rand.Read(cs[:])
	cv := NewCheckVector(&cs, n)
	s1 := seed.Expand(n)
	o1, o2 := cv.Open(&s1), cv.Open(&s2)
	Z := o1.Z.Add(o2.Z)
	w1 := CheckW1(Z, &s1, &o1)
	w2 := CheckW2(Z, &s2, &o2)
	return CheckAccept(o1.S, o2.S, w1, w2)
}

// TestValidityCheck is spec §9.2 #14: one-hot vectors pass, M·e_v, e_u + e_v,
// −e_v, 0 and a wrong mask c ≠ a² fail.
func TestValidityCheck(t *testing.T) {
	const n = 6
	onehot := func(v int) []Elem { x := make([]Elem, n); x[v] = 1; return x }
	cases := []struct {
		name    string
		x       []Elem
		badMask bool
		ok      bool
	}{
		{"e_0", onehot(0), false, true},
		{"e_5", onehot(5), false, true},
		{"zero", make([]Elem, n), false, false},
		{"M·e_v", func() []Elem { x := onehot(2); x[2] = 1000; return x }(), false, false},
		{"e_u+e_v", func() []Elem { x := onehot(1); x[3] = 1; return x }(), false, false},
		{"−e_v", func() []Elem { x := onehot(1); x[1] = Elem(1).Neg(); return x }(), false, false},
		{"e_u+e_v−e_w (sum 1)", func() []Elem { x := onehot(1); x[3] = 1; x[4] = Elem(1).Neg(); return x }(), false, false},
		{"2e_u−e_v (sum 1)", func() []Elem { x := make([]Elem, n); x[0] = 2; x[1] = Elem(1).Neg(); return x }(), false, false},
		{"bad mask", onehot(4), true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				seed, s2, err := splitVector(tc.x, rand.Reader, tc.badMask)
				if err != nil {
					t.Fatal(err)
				}
				if got := runCheck(t, seed, s2, n); got != tc.ok {
					t.Fatalf("accept = %v, want %v", got, tc.ok)
				}
			}
		})
	}
}

func TestPermutationUniform(t *testing.T) {
	// χ² on the position of element 0 over many permutations of 8.
	const n, trials = 8, 16000
	var counts [n]int
	for range trials {
		p, err := randomPermutation(n, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for pos, li := range p {
			if li == 0 {
				counts[pos]++
			}
		}
	}
	exp := float64(trials) / n
	chi := 0.0
	for _, c := range counts {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	if chi > 24.3 { // p ≈ 0.001 for 7 degrees of freedom
		t.Fatalf("χ² = %.1f, counts %v", chi, counts)
	}
}

func BenchmarkFieldMul(b *testing.B) {
	x, y := Elem(123456789), Elem(Modulus-5)
	for b.Loop() {
		x = x.Mul(y)
	}
	_ = x
}
