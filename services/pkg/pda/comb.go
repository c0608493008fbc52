package pda

import (
	"crypto/subtle"

	"filippo.io/edwards25519/field"
)

// combTable speeds up multiplication of a fixed public key (h_DB, h_PRX, h_DB·h_PRX) by
// secret scalars on ristretto255. The libraries precompute tables only for the generator,
// so every ElGamal encryption and re-randomisation under a public key would otherwise pay
// a full variable-base multiplication; with 64 signed 4-bit windows of 8 points each, a
// multiplication is 64 additions and 64 constant-time 8-way selections, and no doublings.
//
// On the edwards25519 backend (r255.go) the points are stored in affine Niels form
// (y+x, y−x, 2d·xy) and added with mixed additions (8 field multiplications each), like
// the library's own ScalarBaseMult tables; on the circl backend they are circl elements.
//
// P-256 in circl converts every addition through big.Int affine coordinates, so an
// addition costs a quarter of a multiplication there and no table is built.
type combTable struct {
	g     *Group
	pts   *[64][8]Element    // circl backend: pts[i][j] = (j+1)·16^i·P
	niels *[64][8]nielsPoint // edwards25519 backend: the same points in affine Niels form
}

func newCombTable(g *Group, p Element) *combTable {
	if g.id != Ristretto255 {
		return nil
	}
	t := &combTable{g: g}
	var pts [64][8]Element
	cur := p.Copy()
	for i := range 64 {
		pts[i][0] = cur.Copy()
		for j := 1; j < 8; j++ {
			pts[i][j] = g.add(pts[i][j-1], cur)
		}
		for range 4 {
			cur.Dbl(cur)
		}
	}
	if _, ok := g.g.(r255Group); ok {
		t.niels = new([64][8]nielsPoint)
		for i := range pts {
			for j := range pts[i] {
				t.niels[i][j].fromElement(pts[i][j].(*r255Element))
			}
		}
	} else {
		t.pts = &pts
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
	if t.niels != nil {
		return t.mulNiels(&d)
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

// nielsPoint is an affine point (x, y) as (y+x, y−x, 2d·x·y); the identity is (1, 1, 0).
type nielsPoint struct{ ypx, ymx, xy2d field.Element }

var r255D2 = new(field.Element).Add(r255D, r255D)

func (n *nielsPoint) fromElement(e *r255Element) {
	X, Y, Z, _ := e.p.ExtendedCoordinates()
	var zInv, x, y field.Element
	zInv.Invert(Z) // public table points; built once per key
	x.Multiply(X, &zInv)
	y.Multiply(Y, &zInv)
	n.ypx.Add(&y, &x)
	n.ymx.Subtract(&y, &x)
	n.xy2d.Multiply(&x, &y)
	n.xy2d.Multiply(&n.xy2d, r255D2)
}

// extPoint is an extended-coordinates point (X:Y:Z:T), x = X/Z, y = Y/Z, xy = T/Z.
type extPoint struct{ X, Y, Z, T field.Element }

// addNiels sets p = p + q (mixed addition, ref10 ge_madd; complete for a = −1, so the
// identity and equal points need no special case).
func (p *extPoint) addNiels(q *nielsPoint) {
	var a, b, c, d, e, f, g, h field.Element
	a.Add(&p.Y, &p.X)
	a.Multiply(&a, &q.ypx)
	b.Subtract(&p.Y, &p.X)
	b.Multiply(&b, &q.ymx)
	c.Multiply(&p.T, &q.xy2d)
	d.Add(&p.Z, &p.Z)
	e.Subtract(&a, &b)
	h.Add(&a, &b)
	g.Add(&d, &c)
	f.Subtract(&d, &c)
	p.X.Multiply(&e, &f)
	p.Y.Multiply(&g, &h)
	p.Z.Multiply(&f, &g)
	p.T.Multiply(&e, &h)
}

func (t *combTable) mulNiels(d *[64]int8) Element {
	var acc extPoint
	acc.Y.One()
	acc.Z.One()
	var sel nielsPoint
	var negXY field.Element
	for i := range 64 {
		v := d[i]
		sign := int(uint8(v) >> 7) // 1 if negative
		abs := uint8(v) ^ uint8(-int8(sign)) + uint8(sign)
		sel.ypx.One()
		sel.ymx.One()
		sel.xy2d.Zero()
		for j := range 8 {
			c := subtle.ConstantTimeByteEq(abs, uint8(j+1))
			q := &t.niels[i][j]
			sel.ypx.Select(&q.ypx, &sel.ypx, c)
			sel.ymx.Select(&q.ymx, &sel.ymx, c)
			sel.xy2d.Select(&q.xy2d, &sel.xy2d, c)
		}
		// −(x, y) = (−x, y): swap y+x and y−x, negate 2d·xy.
		sel.ypx.Swap(&sel.ymx, sign)
		negXY.Negate(&sel.xy2d)
		sel.xy2d.Select(&negXY, &sel.xy2d, sign)
		acc.addNiels(&sel)
	}
	e := &r255Element{}
	if _, err := e.p.SetExtendedCoordinates(&acc.X, &acc.Y, &acc.Z, &acc.T); err != nil {
		panic("pda: comb result off the curve") // impossible: sums of curve points
	}
	return e
}
