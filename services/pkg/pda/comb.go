package pda

import "crypto/subtle"

// combTable speeds up multiplication of a fixed public key (h_DB, h_PRX, h_DB·h_PRX) by
// secret scalars on ristretto255. circl precomputes tables only for the generator, so
// every ElGamal encryption and re-randomisation under a public key would otherwise pay a
// full variable-base multiplication (~49 µs); with 64 signed 4-bit windows of 8 points
// each, a multiplication is 64 additions and 64 constant-time 8-way selections.
//
// P-256 in circl converts every addition through big.Int affine coordinates, so an
// addition costs a quarter of a multiplication there and no table is built.
type combTable struct {
	g   *Group
	pts [64][8]Element // pts[i][j] = (j+1)·16^i·P
}

func newCombTable(g *Group, p Element) *combTable {
	if g.id != Ristretto255 {
		return nil
	}
	t := &combTable{g: g}
	cur := p.Copy()
	for i := range 64 {
		t.pts[i][0] = cur.Copy()
		for j := 1; j < 8; j++ {
			t.pts[i][j] = g.add(t.pts[i][j-1], cur)
		}
		for range 4 {
			cur.Dbl(cur)
		}
	}
	return t
}

// mul returns s·P. The digit recoding, selection and negation are branch-free in the
// scalar, so the running time does not depend on s.
func (t *combTable) mul(s Scalar) Element {
	if countMuls != nil {
		countMuls.table++
	}
	sb, _ := s.MarshalBinary() // 32 bytes little-endian, s < 2^253
	var d [64]int8
	for i := range 32 {
		d[2*i] = int8(sb[i] & 15)
		d[2*i+1] = int8(sb[i] >> 4)
	}
	// Signed digits in [-8, 8): the top digit absorbs the final carry (s < 2^253 keeps it ≤ 8).
	for i := range 63 {
		c := (d[i] + 8) >> 4
		d[i] -= c << 4
		d[i+1] += c
	}
	acc := t.g.NewElement()
	sel := t.g.NewElement()
	neg := t.g.NewElement()
	id := t.g.NewElement()
	for i := range 64 {
		v := d[i]
		sign := int(uint8(v) >> 7) // 1 if negative
		abs := uint8(v) ^ uint8(-int8(sign)) + uint8(sign)
		sel.Set(id)
		for j := range 8 {
			sel.CMov(subtle.ConstantTimeByteEq(abs, uint8(j+1)), t.pts[i][j])
		}
		neg.Neg(sel)
		sel.CMov(sign, neg)
		acc.Add(acc, sel)
	}
	return acc
}
