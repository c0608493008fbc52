package pps

import "math"

// Fixed is a Q24.8 two's-complement fixed-point value (D1): 24 integer bits including the
// sign and 8 fractional bits in an int32. Its methods are the bit-exact plaintext model the
// compiled circuits are tested against (spec §10 #1).
type Fixed int32

const (
	// FracBits is the number of fractional bits of Fixed.
	FracBits = 8
	// One is 1.0 in Q24.8.
	One Fixed = 1 << FracBits
	// MaxFixed and MinFixed are INT32_MAX and INT32_MIN: the nullifying values of min and
	// max (D12) and the results of a division by zero (D1).
	MaxFixed Fixed = math.MaxInt32
	MinFixed Fixed = math.MinInt32
)

// FixedFromFloat rounds f to the nearest Q24.8 value, saturating at the ends of the range.
func FixedFromFloat(f float64) Fixed {
	v := math.Round(f * float64(One))
	switch {
	case math.IsNaN(v):
		return 0
	case v >= math.MaxInt32:
		return MaxFixed
	case v <= math.MinInt32:
		return MinFixed
	}
	return Fixed(v)
}

// FixedFromInt is the integer n in Q24.8 (wrapping outside ±2^23).
func FixedFromInt(n int) Fixed { return Fixed(int32(n) << FracBits) }

// Float64 is the real number x represents.
func (x Fixed) Float64() float64 { return float64(x) / float64(One) }

// Add is a+b wrapping mod 2^32.
func (x Fixed) Add(y Fixed) Fixed { return x + y }

// Sub is a−b wrapping mod 2^32.
func (x Fixed) Sub(y Fixed) Fixed { return x - y }

// Neg is −a wrapping (−INT32_MIN = INT32_MIN).
func (x Fixed) Neg() Fixed { return -x }

// Abs is |a| wrapping (|INT32_MIN| = INT32_MIN).
func (x Fixed) Abs() Fixed {
	if x < 0 {
		return -x
	}
	return x
}

// Mul is the 64-bit signed product shifted right arithmetically by 8 (floor) and truncated
// to 32 bits: bits 8..39 of the product (D1).
func (x Fixed) Mul(y Fixed) Fixed { return Fixed(int32((int64(x) * int64(y)) >> FracBits)) }

// Div is restoring division of |a|<<8 (40 bits) by |b|, the 40-bit quotient truncated to 32
// bits and negated if the signs differ; b = 0 gives INT32_MAX, or INT32_MIN for negative a (D1).
func (x Fixed) Div(y Fixed) Fixed {
	if y == 0 {
		if x < 0 {
			return MinFixed
		}
		return MaxFixed
	}
	n := uint64(absU32(x)) << FracBits
	q := uint32(n / uint64(absU32(y)))
	if (x < 0) != (y < 0) {
		q = -q
	}
	return Fixed(int32(q))
}

// Less is the signed comparison a < b.
func (x Fixed) Less(y Fixed) bool { return x < y }

// Min2 and Max2 are the signed minimum and maximum (the paper's libgarble blocks).
func Min2(a, b Fixed) Fixed {
	if b < a {
		return b
	}
	return a
}

func Max2(a, b Fixed) Fixed {
	if a < b {
		return b
	}
	return a
}

func absU32(x Fixed) uint32 {
	if x < 0 {
		return uint32(-int64(x))
	}
	return uint32(x)
}
