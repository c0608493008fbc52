package dsl

import (
	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// cbit is a circuit bit: a wire, or a constant known at compile time (k = 0 or 1). Folding
// constants here is what keeps AND counts at the §4.7 budgets: additions with carry-in 0,
// multiplications by the high sign-extension bits and the division's zero bits cost nothing.
type cbit struct {
	w gc.Wire
	k int8 // -1: the wire w; 0, 1: a constant
}

var zero, one = cbit{k: 0}, cbit{k: 1}

// word is a Q24.8 value, bit 0 first.
type word [pps.ValueBits]cbit

// gates emits gates on a gc.Builder with constant folding and memoisation of AND, XOR and
// NOT on the same wires.
type gates struct {
	b     *gc.Builder
	and2  map[[2]gc.Wire]gc.Wire
	xor2  map[[2]gc.Wire]gc.Wire
	not1  map[gc.Wire]gc.Wire
	isNot map[gc.Wire]gc.Wire // NOT output -> its input, so ¬¬x folds to x
}

func newGates(b *gc.Builder) *gates {
	return &gates{b: b, and2: map[[2]gc.Wire]gc.Wire{}, xor2: map[[2]gc.Wire]gc.Wire{},
		not1: map[gc.Wire]gc.Wire{}, isNot: map[gc.Wire]gc.Wire{}}
}

func wireOf(w gc.Wire) cbit { return cbit{w: w, k: -1} }

func pair(x, y gc.Wire) [2]gc.Wire {
	if x > y {
		x, y = y, x
	}
	return [2]gc.Wire{x, y}
}

func (g *gates) xor(x, y cbit) cbit {
	switch {
	case x.k >= 0 && y.k >= 0:
		return cbit{k: x.k ^ y.k}
	case x.k == 0:
		return y
	case y.k == 0:
		return x
	case x.k == 1:
		return g.not(y)
	case y.k == 1:
		return g.not(x)
	case x.w == y.w:
		return zero
	}
	key := pair(x.w, y.w)
	if w, ok := g.xor2[key]; ok {
		return wireOf(w)
	}
	w := g.b.XOR(x.w, y.w)
	g.xor2[key] = w
	return wireOf(w)
}

func (g *gates) and(x, y cbit) cbit {
	switch {
	case x.k == 0 || y.k == 0:
		return zero
	case x.k == 1:
		return y
	case y.k == 1:
		return x
	case x.w == y.w:
		return x
	}
	key := pair(x.w, y.w)
	if w, ok := g.and2[key]; ok {
		return wireOf(w)
	}
	w := g.b.AND(x.w, y.w)
	g.and2[key] = w
	return wireOf(w)
}

func (g *gates) not(x cbit) cbit {
	if x.k >= 0 {
		return cbit{k: 1 - x.k}
	}
	if in, ok := g.isNot[x.w]; ok {
		return wireOf(in)
	}
	if w, ok := g.not1[x.w]; ok {
		return wireOf(w)
	}
	w := g.b.NOT(x.w)
	g.not1[x.w], g.isNot[w] = w, x.w
	return wireOf(w)
}

// muxBit is s ? t : f with one AND: f ⊕ (s ∧ (f ⊕ t)).
func (g *gates) muxBit(s, t, f cbit) cbit { return g.xor(f, g.and(s, g.xor(f, t))) }

// wire materialises a bit for an output.
func (g *gates) wire(x cbit) gc.Wire {
	if x.k >= 0 {
		return g.b.Const(x.k == 1)
	}
	return x.w
}

// addBits is a + b + cin over equal widths with the ripple carry of Kolesnikov–Sadeghi–
// Schneider (one AND per bit: c' = c ⊕ ((a⊕c) ∧ (b⊕c))). With carryOut the result has one
// more bit; without it the last carry is not computed.
func (g *gates) addBits(a, b []cbit, cin cbit, carryOut bool) []cbit {
	out := make([]cbit, len(a), len(a)+1)
	c := cin
	for i := range a {
		out[i] = g.xor(g.xor(a[i], b[i]), c)
		if i < len(a)-1 || carryOut {
			c = g.xor(c, g.and(g.xor(a[i], c), g.xor(b[i], c)))
		}
	}
	if carryOut {
		out = append(out, c)
	}
	return out
}

// geq is the unsigned a ≥ b: the carry out of a + ¬b + 1, one AND per bit.
func (g *gates) geq(a, b []cbit) cbit {
	c := one
	for i := range a {
		nb := g.not(b[i])
		c = g.xor(c, g.and(g.xor(a[i], c), g.xor(nb, c)))
	}
	return c
}

func (g *gates) notBits(a []cbit) []cbit {
	out := make([]cbit, len(a))
	for i := range a {
		out[i] = g.not(a[i])
	}
	return out
}

// condNeg is s ? −a : a as (a ⊕ s…s) + s: an increment chain, one AND per bit but the last.
func (g *gates) condNeg(a []cbit, s cbit) []cbit {
	out := make([]cbit, len(a))
	c := s
	for i := range a {
		x := g.xor(a[i], s)
		out[i] = g.xor(x, c)
		if i < len(a)-1 {
			c = g.and(x, c)
		}
	}
	return out
}

func constWord(x pps.Fixed) *word {
	var w word
	for j := range w {
		w[j] = cbit{k: int8(uint32(x) >> j & 1)}
	}
	return &w
}

// circuit is the gate backend.
type circuit struct {
	g        *gates
	values   [][]gc.Wire
	validity []gc.Wire
}

func (c *circuit) konst(x pps.Fixed) num { return constWord(x) }

func (c *circuit) input(s int) (num, bit) {
	var w word
	for j := range w {
		w[j] = wireOf(c.values[s][j])
	}
	return &w, wireOf(c.validity[s])
}

func (c *circuit) add(a, b num) num {
	x, y := a.(*word), b.(*word)
	var w word
	copy(w[:], c.g.addBits(x[:], y[:], zero, false))
	return &w
}

// sumN is Σ xs mod 2^32 (xs: three words or more) by carry-save column compression
// (Wallace): a full adder turns three bits of column j into one bit of column j and a carry
// into column j+1 with one AND (c ⊕ ((a⊕c) ∧ (b⊕c)) is the majority), a half adder two bits
// into one and a carry; each column is compressed first-in first-out down to one bit, the top
// column by XOR alone (its carries leave the word). Column j < 31 then costs ⌈(c_j − 1)/2⌉
// ANDs for its c_j bits, where the fold of n − 1 ripple adders pays n − 1 in every column:
// the low columns, which receive few carries, are cheaper (288 words: 8,616 ANDs instead of
// 8,897). Constant bits are dropped (0) or folded by gates.
func (c *circuit) sumN(xs []num) num {
	var cols [pps.ValueBits][]cbit
	for _, x := range xs {
		for j, b := range x.(*word) {
			if b.k != 0 {
				cols[j] = append(cols[j], b)
			}
		}
	}
	var w word
	for j := range cols {
		q := cols[j]
		if j == len(cols)-1 {
			acc := zero
			for _, b := range q {
				acc = c.g.xor(acc, b)
			}
			w[j] = acc
			break
		}
		for len(q) > 1 {
			var s, carry cbit
			if len(q) >= 3 {
				a, b, d := q[0], q[1], q[2]
				q = q[3:]
				s = c.g.xor(c.g.xor(a, b), d)
				carry = c.g.xor(d, c.g.and(c.g.xor(a, d), c.g.xor(b, d)))
			} else {
				a, b := q[0], q[1]
				q = q[2:]
				s, carry = c.g.xor(a, b), c.g.and(a, b)
			}
			q = append(q, s)
			if carry.k != 0 {
				cols[j+1] = append(cols[j+1], carry)
			}
		}
		w[j] = zero
		if len(q) == 1 {
			w[j] = q[0]
		}
	}
	return &w
}

func (c *circuit) sub(a, b num) num {
	x, y := a.(*word), b.(*word)
	var w word
	copy(w[:], c.g.addBits(x[:], c.g.notBits(y[:]), one, false))
	return &w
}

func (c *circuit) neg(a num) num { return c.sub(constWord(0), a) }

func (c *circuit) abs(a num) num {
	x := a.(*word)
	var w word
	copy(w[:], c.g.condNeg(x[:], x[31]))
	return &w
}

// less is signed a < b: unsigned comparison with the sign bits flipped (32 ANDs).
func (c *circuit) less(a, b num) bit {
	x, y := *a.(*word), *b.(*word)
	x[31], y[31] = c.g.not(x[31]), c.g.not(y[31])
	return c.g.not(c.g.geq(x[:], y[:]))
}

func (c *circuit) equal(a, b num) bit {
	x, y := a.(*word), b.(*word)
	e := one
	for j := range x {
		e = c.g.and(e, c.g.not(c.g.xor(x[j], y[j])))
	}
	return e
}

func (c *circuit) mux(s bit, t, f num) num {
	sb, x, y := s.(cbit), t.(*word), f.(*word)
	var w word
	for j := range w {
		w[j] = c.g.muxBit(sb, x[j], y[j])
	}
	return &w
}

func (c *circuit) mask(a num, v bit) num {
	x, vb := a.(*word), v.(cbit)
	var w word
	for j := range w {
		w[j] = c.g.and(x[j], vb)
	}
	return &w
}

// mulBits is the signed Q24.8 product: both operands sign-extended to 40 bits, the
// schoolbook product mod 2^40, bits 8..39 kept (D1: the 64-bit product shifted right by 8
// and truncated).
func (c *circuit) mul(a, b num) num {
	const width = pps.ValueBits + pps.FracBits
	x, y := a.(*word), b.(*word)
	ext := func(v *word) []cbit {
		e := make([]cbit, width)
		for i := range e {
			e[i] = v[min(i, pps.ValueBits-1)]
		}
		return e
	}
	xe, ye := ext(x), ext(y)
	acc := make([]cbit, width)
	for i := range width {
		row := make([]cbit, width-i)
		for k := range row {
			row[k] = c.g.and(xe[k], ye[i])
		}
		if i == 0 {
			copy(acc, row)
			continue
		}
		copy(acc[i:], c.g.addBits(acc[i:], row, zero, false))
	}
	var w word
	copy(w[:], acc[pps.FracBits:])
	return &w
}

// div is D1's division: restoring division of |a|<<8 (40 bits) by |b| in 40 iterations,
// the quotient truncated to 32 bits and negated if the signs differ; b = 0 gives INT32_MAX,
// or INT32_MIN for negative a.
func (c *circuit) div(a, b num) num {
	const width = pps.ValueBits + pps.FracBits
	x, y := a.(*word), b.(*word)
	sa, sb := x[31], y[31]
	ax, ay := c.g.condNeg(x[:], sa), c.g.condNeg(y[:], sb)
	n := make([]cbit, width) // |a| << 8
	for i := range n {
		n[i] = zero
		if i >= pps.FracBits {
			n[i] = ax[i-pps.FracBits]
		}
	}
	d := append(append([]cbit(nil), ay...), zero) // 33 bits
	r := make([]cbit, pps.ValueBits)
	for i := range r {
		r[i] = zero
	}
	q := make([]cbit, width)
	for i := width - 1; i >= 0; i-- {
		shifted := append([]cbit{n[i]}, r...) // 33 bits: (r << 1) | n_i
		diff := c.g.addBits(shifted, c.g.notBits(d), one, true)
		q[i] = diff[len(diff)-1] // carry out: shifted ≥ d
		for j := range r {
			r[j] = c.g.muxBit(q[i], diff[j], shifted[j])
		}
	}
	quot := c.g.condNeg(q[:pps.ValueBits], c.g.xor(sa, sb))
	bz := c.equal(b, constWord(0)).(cbit)
	var w word
	for j := range w {
		over := c.g.not(sa) // INT32_MAX for a ≥ 0, INT32_MIN for a < 0
		if j == pps.ValueBits-1 {
			over = sa
		}
		w[j] = c.g.muxBit(bz, over, quot[j])
	}
	return &w
}

// count adds the bits with a tree of ripple adders (about 2 ANDs per bit) and places the
// sum at the integer bits of a Q24.8 word.
func (c *circuit) count(bs []bit) num {
	level := make([][]cbit, len(bs))
	for i, b := range bs {
		level[i] = []cbit{b.(cbit)}
	}
	if len(level) == 0 {
		return constWord(0)
	}
	for len(level) > 1 {
		var next [][]cbit
		for i := 0; i+1 < len(level); i += 2 {
			x, y := level[i], level[i+1]
			for len(y) < len(x) {
				y = append(y, zero)
			}
			next = append(next, c.g.addBits(x, y, zero, true))
		}
		if len(level)%2 == 1 {
			next = append(next, level[len(level)-1])
		}
		level = next
	}
	var w word
	for j := range w {
		w[j] = zero
		if k := j - pps.FracBits; k >= 0 && k < len(level[0]) {
			w[j] = level[0][k]
		}
	}
	return &w
}

func (c *circuit) bitConst(v bool) bit {
	if v {
		return one
	}
	return zero
}
func (c *circuit) not(a bit) bit    { return c.g.not(a.(cbit)) }
func (c *circuit) and(a, b bit) bit { return c.g.and(a.(cbit), b.(cbit)) }
