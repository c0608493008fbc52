package pps

import "fmt"

// OutputBytes is the size of m output bits packed LSB-first.
func OutputBytes(bits int) int { return (bits + 7) / 8 }

// OutputMask is r = PRG(s'_ρ, ceil(m/8)) truncated to m bits, packed LSB-first: the one-time
// mask the garbled circuit XORs into its output (spec §3.7). Bits past m are zero.
func OutputMask(seed *Seed, bits int) []byte {
	r := make([]byte, OutputBytes(bits))
	PRG(seed, r)
	if rem := bits % 8; rem != 0 {
		r[len(r)-1] &= byte(1)<<rem - 1
	}
	return r
}

// Unmask is the subscriber's o = (o⊕r) ⊕ r for the function round seed s'_ρ (spec §8.7).
// masked must be exactly ceil(m/8) bytes with its padding bits zero.
func Unmask(seed *Seed, masked []byte, bits int) ([]byte, error) {
	if bits <= 0 || len(masked) != OutputBytes(bits) {
		return nil, fmt.Errorf("unmask %d output bits from %d bytes: %w", bits, len(masked), ErrMalformed)
	}
	if rem := bits % 8; rem != 0 && masked[len(masked)-1]>>rem != 0 {
		return nil, fmt.Errorf("unmask %d output bits: padding bits set: %w", bits, ErrMalformed)
	}
	o := OutputMask(seed, bits)
	for i := range o {
		o[i] ^= masked[i]
	}
	return o, nil
}

// DecodeFixed reads consecutive 32-bit Q24.8 outputs, LSB-first (spec §8.7).
func DecodeFixed(o []byte, n int) ([]Fixed, error) {
	if n < 0 || len(o) < 4*n {
		return nil, fmt.Errorf("decode %d Q24.8 outputs from %d bytes: %w", n, len(o), ErrMalformed)
	}
	out := make([]Fixed, n)
	for i := range out {
		out[i] = Fixed(int32(uint32(o[4*i]) | uint32(o[4*i+1])<<8 | uint32(o[4*i+2])<<16 | uint32(o[4*i+3])<<24))
	}
	return out, nil
}

// EncodeFixed packs Q24.8 values LSB-first, the inverse of DecodeFixed.
func EncodeFixed(xs []Fixed) []byte {
	out := make([]byte, 4*len(xs))
	for i, x := range xs {
		u := uint32(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}
