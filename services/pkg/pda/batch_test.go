package pda

import (
	"bytes"
	"crypto/rand"
	"errors"
	"math/big"
	mrand "math/rand/v2"
	"testing"
)

// proofFieldOffsets returns the byte offset of every commitment and scalar of a submission
// of s (the proof part of the format).
func proofFieldOffsets(s *Suite) []int {
	n := 1 + int(s.params.Chunks)
	off := 8 + n*s.ctSize()
	if s.HasValues() {
		off += s.ctSize()
	}
	var offs []int
	for range s.commitmentsSize() / s.g.elementSize {
		offs = append(offs, off)
		off += s.g.elementSize
	}
	for off < s.SubmissionSize() {
		offs = append(offs, off)
		off += s.g.scalarSize
	}
	return offs
}

// tamper replaces the proof field at off by another valid encoding: a commitment R by
// R + G, a scalar x by x + 1.
func tamper(t testing.TB, s *Suite, item []byte, off int) []byte {
	g := s.g
	bad := bytes.Clone(item)
	if off < 8+len(s.ParseSubmissionMust(t, item).cts)+s.commitmentsSize() {
		e, err := g.DecodeElement(item[off : off+g.elementSize])
		if err != nil {
			t.Fatal(err)
		}
		copy(bad[off:], g.encodeElement(g.add(e, g.Generator())))
		return bad
	}
	x, err := g.DecodeScalar(item[off : off+g.scalarSize])
	if err != nil {
		t.Fatal(err)
	}
	copy(bad[off:], g.AppendScalar(nil, x.Add(x, g.NewScalar().SetUint64(1))))
	return bad
}

func (s *Suite) ParseSubmissionMust(t testing.TB, b []byte) *Submission {
	sub, err := s.ParseSubmission(b)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func batchItems(t testing.TB, d *deployment, id SessionID, n int, vals bool) [][]byte {
	items := make([][]byte, n)
	for i := range items {
		k, _ := IPKeyFromBytes([]byte{192, 0, 2, byte(i)})
		v := uint16(1)
		if vals {
			v = d.suite.params.Values[i%len(d.suite.params.Values)]
		}
		var err error
		if items[i], err = NewParticipant(d.suite, d.rnd).Item(id, uint32(i), Observation{k, v}); err != nil {
			t.Fatal(err)
		}
	}
	return items
}

// One forged proof among many: the batch check fails, the fallback rejects exactly that
// item with ErrBadProof and accepts the rest.
func TestBatchOneForgery(t *testing.T) {
	for _, vals := range [][]uint16{nil, {0, 1, 7}} {
		d := newDeployment(t, deployOpts{values: vals, seed: 70})
		sess, id := d.newSession("p")
		items := batchItems(t, d, id, 40, vals != nil)
		offs := proofFieldOffsets(d.suite)
		for trial := range 3 {
			pos := []int{0, 17, 39}[trial]
			in := append([][]byte(nil), items...)
			in[pos] = tamper(t, d.suite, items[pos], offs[trial*len(offs)/3])
			sess.accepted = map[uint32]bool{}
			out, rej := d.proxy.Ingest(sess, in)
			if len(rej) != 1 || rej[0].Position != pos || !errors.Is(rej[0].Err, ErrBadProof) || len(out) != len(items)-1 {
				t.Fatalf("values=%v pos %d: %d accepted, rejections %+v", vals, pos, len(out), rej)
			}
		}
	}
}

// Batch and per-item verification agree on random mixes of valid and invalid proofs
// (tampered fields, wrong session, wrong index), and Ingest rejects exactly the invalid
// ones.
func TestBatchAgreesWithSingle(t *testing.T) {
	r := mrand.New(mrand.NewPCG(7, 7))
	for _, vals := range [][]uint16{nil, {1, 2}} {
		d := newDeployment(t, deployOpts{values: vals, seed: 71})
		s := d.suite
		sess, id := d.newSession("p")
		items := batchItems(t, d, id, 24, vals != nil)
		_, other := d.newSession("q")
		foreign := batchItems(t, d, other, 24, vals != nil)
		offs := proofFieldOffsets(s)
		for trial := range 12 {
			n := 2 + r.IntN(len(items)-1)
			in := append([][]byte(nil), items[:n]...)
			want := make([]bool, n) // valid?
			for i := range in {
				want[i] = true
				if r.IntN(4) != 0 && trial > 0 { // trial 0: all valid
					continue
				}
				want[i] = false
				switch r.IntN(3) {
				case 0:
					in[i] = tamper(t, s, in[i], offs[r.IntN(len(offs))])
				case 1:
					in[i] = foreign[i] // bound to another session
				case 2:
					in[i] = bytes.Clone(in[i])
					in[i][7] ^= 0x80 // another index
				}
			}
			var eqs [][]linEq
			all := true
			for i, b := range in {
				sub := s.ParseSubmissionMust(t, b)
				e := s.equations(id, sub)
				if got := s.holdsAll(e); got != want[i] || (s.verify(id, sub) == nil) != want[i] {
					t.Fatalf("trial %d item %d: single verification says %v, want %v", trial, i, got, want[i])
				}
				eqs = append(eqs, e)
				all = all && want[i]
			}
			if got := s.batchVerify(eqs); got != all {
				t.Fatalf("trial %d: batch says %v, want %v", trial, got, all)
			}
			sess.accepted = map[uint32]bool{}
			_, rej := d.proxy.Ingest(sess, in)
			bad := map[int]bool{}
			for _, x := range rej {
				bad[x.Position] = true
				if !errors.Is(x.Err, ErrBadProof) && !errors.Is(x.Err, ErrReplay) {
					t.Fatalf("trial %d: %v", trial, x.Err)
				}
			}
			for i := range in {
				if bad[i] == want[i] && !(errors.Is(rejErr(rej, i), ErrReplay)) {
					t.Fatalf("trial %d item %d: rejected=%v, valid=%v", trial, i, bad[i], want[i])
				}
			}
		}
	}
}

func rejErr(rej []Rejection, pos int) error {
	for _, r := range rej {
		if r.Position == pos {
			return r.Err
		}
	}
	return nil
}

// Two forgeries whose errors cancel in an unweighted sum (z_α + 1 in one item, z_α − 1 in
// the other) must fail the weighted batch check; both are rejected individually.
func TestBatchCancellingForgeries(t *testing.T) {
	d := newDeployment(t, deployOpts{seed: 72})
	s, g := d.suite, d.suite.g
	sess, id := d.newSession("p")
	items := batchItems(t, d, id, 8, false)
	zOff := 8 + (1+int(s.params.Chunks))*s.ctSize() + s.commitmentsSize()
	shift := func(b []byte, delta Scalar) []byte {
		b = bytes.Clone(b)
		x, _ := g.DecodeScalar(b[zOff : zOff+g.scalarSize])
		copy(b[zOff:], g.AppendScalar(nil, x.Add(x, delta)))
		return b
	}
	one := g.NewScalar().SetUint64(1)
	in := append([][]byte(nil), items...)
	in[2] = shift(items[2], one)
	in[5] = shift(items[5], g.NewScalar().Neg(one))
	// Same challenge in both (z is not hashed), so unweighted the errors G and −G cancel.
	var eqs [][]linEq
	for _, b := range in {
		eqs = append(eqs, s.equations(id, s.ParseSubmissionMust(t, b)))
	}
	if s.batchVerify(eqs) {
		t.Fatal("cancelling forgeries passed the batch check")
	}
	out, rej := d.proxy.Ingest(sess, in)
	if len(out) != 6 || len(rej) != 2 || rej[0].Position != 2 || rej[1].Position != 5 {
		t.Fatalf("accepted %d, rejected %+v", len(out), rej)
	}
}

// Edge cases relevant to soundness: identity commitments are not encodable, weights are
// never zero (even from a reader that returns zeros first) and below 2^128, and the MSM
// agrees with the naive sum (including zero scalars and repeated points).
func TestBatchEdgeCases(t *testing.T) {
	d := newDeployment(t, deployOpts{seed: 73})
	s, g := d.suite, d.suite.g
	_, id := d.newSession("p")
	item := batchItems(t, d, id, 1, false)[0]
	off := proofFieldOffsets(s)[0]
	bad := bytes.Clone(item)
	copy(bad[off:off+g.elementSize], make([]byte, g.elementSize)) // ristretto255 identity
	if _, err := s.ParseSubmission(bad); !errors.Is(err, ErrInvalidElement) {
		t.Fatalf("identity commitment: %v", err)
	}
	for _, id := range []GroupID{Ristretto255, P256} {
		g, _ := NewGroup(id)
		zeros := bytes.NewReader(append(make([]byte, 16*3), bytes.Repeat([]byte{0xff}, 16*8)...))
		ws := randomWeights(g, 3, zeros)
		bound := g.NewScalar().SetUint64(1 << 63)
		bound.Mul(bound, g.NewScalar().SetUint64(1<<63))
		bound.Mul(bound, g.NewScalar().SetUint64(4)) // 2^128
		for i, w := range ws {
			if w.IsZero() {
				t.Fatalf("zero weight %d", i)
			}
			wb := scalarInt(g, w)
			if wb.Cmp(new(big.Int).Lsh(big.NewInt(1), 128)) >= 0 {
				t.Fatalf("weight %d ≥ 2^128", i)
			}
		}
	}
	for _, n := range []int{1, 5, 16, 40, 300} {
		scs := make([]Scalar, n)
		pts := make([]Element, n)
		want := g.NewElement()
		for i := range n {
			scs[i], _ = g.RandomScalar(rand.Reader)
			switch i % 7 {
			case 3:
				scs[i] = g.NewScalar()
			case 5:
				scs[i] = g.NewScalar().SetUint64(1)
			}
			pts[i] = g.HashToElement([]byte{byte(i % 11)}, []byte("msm-test"))
			want.Add(want, g.mul(pts[i], scs[i]))
		}
		if !g.msm(scs, pts).IsEqual(want) {
			t.Fatalf("msm of %d points differs from the naive sum", n)
		}
	}
}

func scalarInt(g *Group, s Scalar) *big.Int {
	b, _ := s.MarshalBinary()
	if g.scalarTopByte != 0 { // little-endian
		b = bytes.Clone(b)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
	}
	return new(big.Int).SetBytes(b)
}
