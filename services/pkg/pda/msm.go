package pda

import "math/bits"

// msm returns Σ scs[i]·pts[i] in variable time: only for public inputs (proof
// verification, whose weights are secret only until the proofs are fixed). Large inputs use
// Pippenger's bucket method with signed c-bit digits: about ⌈256/c⌉ windows of one addition
// per non-zero digit plus 2^c bucket additions, against ~300 group operations for each
// separate multiplication; scalars below 2^128 (the batch weights of the commitments) have
// zero digits in the upper windows and cost half. Small inputs multiply one by one.
func (g *Group) msm(scs []Scalar, pts []Element) Element {
	n := len(pts)
	if countMuls != nil {
		countMuls.msm += n
	}
	if n < 16 || g.id != Ristretto255 { // P-256 additions are too slow in circl (see comb.go)
		acc := g.NewElement()
		for i, p := range pts {
			acc.Add(acc, g.g.NewElement().Mul(p, scs[i]))
		}
		return acc
	}
	c := min(max(bits.Len(uint(n))-3, 4), 12)
	nw := (256+c)/c + 1 // signed digits of a 256-bit scalar, plus the final carry
	digits := make([]int32, n*nw)
	var sb [32]byte
	for i, s := range scs {
		b, _ := s.MarshalBinary()
		if g.scalarTopByte == 0 { // big-endian
			for j := range 32 {
				sb[j] = b[31-j]
			}
		} else {
			copy(sb[:], b)
		}
		signedDigits(&sb, c, digits[i*nw:(i+1)*nw])
	}
	neg := make([]Element, n)
	for i, p := range pts {
		neg[i] = g.NewElement().Neg(p)
	}
	nb := 1 << (c - 1)
	buckets := make([]Element, nb)
	used := make([]bool, nb)
	for i := range buckets {
		buckets[i] = g.NewElement()
	}
	acc, run, sum := g.NewElement(), g.NewElement(), g.NewElement()
	for w := nw - 1; w >= 0; w-- {
		for range c {
			acc.Dbl(acc)
		}
		clear(used)
		for i := range n {
			d := digits[i*nw+w]
			if d == 0 {
				continue
			}
			p := pts[i]
			if d < 0 {
				d, p = -d, neg[i]
			}
			if used[d-1] {
				buckets[d-1].Add(buckets[d-1], p)
			} else {
				buckets[d-1].Set(p)
				used[d-1] = true
			}
		}
		// Σ_k (k+1)·B_k as a sum of running sums, skipping empty buckets.
		started, any := false, false
		for k := nb - 1; k >= 0; k-- {
			if used[k] {
				if started {
					run.Add(run, buckets[k])
				} else {
					run.Set(buckets[k])
					started = true
				}
			}
			if started {
				if any {
					sum.Add(sum, run)
				} else {
					sum.Set(run)
					any = true
				}
			}
		}
		if any {
			acc.Add(acc, sum)
		}
	}
	return acc
}

// signedDigits writes the radix-2^c signed digits of the 256-bit little-endian scalar b,
// each in [−2^(c−1), 2^(c−1)), least significant first; Σ d_j·2^(cj) = b.
func signedDigits(b *[32]byte, c int, out []int32) {
	carry := int32(0)
	half := int32(1) << (c - 1)
	for j := range out {
		pos := j * c
		var v int32
		for k := 0; k < c && pos+k < 256; k++ { // c ≤ 12: a short bit loop is fine here
			bit := (b[(pos+k)>>3] >> ((pos + k) & 7)) & 1
			v |= int32(bit) << k
		}
		v += carry
		carry = 0
		if v >= half {
			v -= half << 1
			carry = 1
		}
		out[j] = v
	}
}
