package dsl

import "github.com/obscura-iot/obscura/services/pkg/pps"

// num and bit are a backend's secret number (a Q24.8 word) and secret bit.
type (
	num any
	bit any
)

// backend is what the interpreter computes with. The same program runs on the plain backend
// (pps.Fixed arithmetic, the bit-exact model of D1) and on the circuit backend (gates), so
// a circuit and its model differ only in how each operation is carried out — and every
// operation of the circuit backend is tested bit-exact against pps.Fixed.
type backend interface {
	konst(x pps.Fixed) num
	input(slot int) (num, bit)
	add(a, b num) num
	sub(a, b num) num
	mul(a, b num) num
	div(a, b num) num
	neg(a num) num
	abs(a num) num
	less(a, b num) bit
	equal(a, b num) bit
	// mux is s ? t : f.
	mux(s bit, t, f num) num
	// mask is v ? a : 0.
	mask(a num, v bit) num
	// count is the number of set bits as a Q24.8 integer.
	count(bs []bit) num
	bitConst(v bool) bit
	not(a bit) bit
	and(a, b bit) bit
}

// multiAdder is a backend that sums many words at once (the circuit: carry-save, cheaper than
// a fold of two-operand adders); the value equals the fold's mod 2^32.
type multiAdder interface {
	sumN(xs []num) num
}

// plain is the model backend.
type plain struct {
	values []pps.Fixed
	valid  []bool
}

func (plain) konst(x pps.Fixed) num { return x }

// input reads slot s. Slots past the given values read as valid zeros: the compiler's first
// pass runs the program only to learn its slots and outputs.
func (p plain) input(s int) (num, bit) {
	if s >= len(p.values) {
		return pps.Fixed(0), true
	}
	return p.values[s], p.valid[s]
}
func (plain) add(a, b num) num { return a.(pps.Fixed).Add(b.(pps.Fixed)) }
func (plain) sub(a, b num) num { return a.(pps.Fixed).Sub(b.(pps.Fixed)) }
func (plain) mul(a, b num) num { return a.(pps.Fixed).Mul(b.(pps.Fixed)) }
func (plain) div(a, b num) num { return a.(pps.Fixed).Div(b.(pps.Fixed)) }
func (plain) neg(a num) num    { return a.(pps.Fixed).Neg() }
func (plain) abs(a num) num    { return a.(pps.Fixed).Abs() }
func (plain) less(a, b num) bit {
	return a.(pps.Fixed).Less(b.(pps.Fixed))
}
func (plain) equal(a, b num) bit { return a.(pps.Fixed) == b.(pps.Fixed) }
func (plain) mux(s bit, t, f num) num {
	if s.(bool) {
		return t
	}
	return f
}
func (plain) mask(a num, v bit) num {
	if v.(bool) {
		return a
	}
	return pps.Fixed(0)
}
func (plain) count(bs []bit) num {
	n := 0
	for _, b := range bs {
		if b.(bool) {
			n++
		}
	}
	return pps.FixedFromInt(n)
}
func (plain) bitConst(v bool) bit { return v }
func (plain) not(a bit) bit       { return !a.(bool) }
func (plain) and(a, b bit) bit    { return a.(bool) && b.(bool) }
