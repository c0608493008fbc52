package pda

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Fiat–Shamir proofs (spec §3.9.4, A11), in one sigma protocol with one challenge e:
//
//   - multi-Schnorr: knowledge of α, β_1..β_n with A_Y = α·G and A_K,i = β_i·G, so the
//     plaintexts P = B_Y − α·h_DB and M_i = B_K,i − β_i·(h_DB+h_PRX) are extractable;
//   - when values are used, a CDS OR-proof that (A_V, B_V − v·G) = (γ·G, γ·h_DB) for some
//     v ∈ D, with branch challenges e_v summing to e. It proves knowledge of γ and blocks
//     value marking (§2.6 #8).
//
// e = H2S("PDA-V1-POK" || SHA-256(PublicParams) || session_id || item_index || ciphertexts
// || commitments), so a proof is bound to (deployment, window, keys, D) through the params
// digest and to (session, index) directly: a copied item fails in any other session or
// position (T-MAL-6). Proof bytes: e || z_α || z_β1..z_βn || (e_v || z_v) for v ∈ D.

type proof struct {
	e  Scalar
	z  []Scalar // z_α, z_β1..z_βn
	ev []Scalar // per value branch
	zv []Scalar
}

// transcript accumulates the challenge input.
type transcript struct {
	g *Group
	b []byte
}

func (s *Suite) newTranscript(session SessionID, index uint32, ciphertexts []byte) *transcript {
	b := make([]byte, 0, len(labelProof)+32+SessionIDSize+4+len(ciphertexts)+8*s.g.elementSize)
	b = append(b, labelProof...)
	b = append(b, s.digest[:]...)
	b = append(b, session[:]...)
	b = binary.BigEndian.AppendUint32(b, index)
	b = append(b, ciphertexts...)
	return &transcript{g: s.g, b: b}
}

// add appends a commitment. The identity (possible only for a forged proof) is written as
// zero bytes, which no other element encodes to in either group's fixed-length form
// except ristretto255's identity itself.
func (t *transcript) add(e Element) {
	if e.IsIdentity() {
		t.b = append(t.b, make([]byte, t.g.elementSize)...)
		return
	}
	b, _ := e.MarshalBinaryCompress()
	t.b = append(t.b, b...)
}

func (t *transcript) challenge() Scalar { return t.g.HashToScalar(t.b, dstHashToScalar) }

// witness is what the participant knows about one item.
type witness struct {
	x      []Scalar // α, β_1..β_n
	gamma  Scalar   // value randomness (values mode)
	vIndex int      // index of v in D
}

// prove builds the proof for an item whose ciphertext bytes are cts.
func (s *Suite) prove(session SessionID, index uint32, cts []byte, st *itemStatement, w *witness, rand io.Reader) (*proof, error) {
	g := s.g
	tr := s.newTranscript(session, index, cts)
	nonces := make([]Scalar, len(w.x))
	for i := range nonces {
		r, err := g.RandomScalar(rand)
		if err != nil {
			return nil, err
		}
		nonces[i] = r
		tr.add(g.mulGen(r))
	}
	pf := &proof{}
	var wv Scalar
	if s.HasValues() {
		nD := len(s.params.Values)
		pf.ev, pf.zv = make([]Scalar, nD), make([]Scalar, nD)
		for d := range nD {
			if d == w.vIndex {
				r, err := g.RandomScalar(rand)
				if err != nil {
					return nil, err
				}
				wv = r
				tr.add(g.mulGen(r))
				tr.add(s.hDB.mul(r))
				continue
			}
			// Simulated branch: pick (e_d, z_d) and solve for the commitments.
			ed, err := g.RandomScalar(rand)
			if err != nil {
				return nil, err
			}
			zd, err := g.RandomScalar(rand)
			if err != nil {
				return nil, err
			}
			pf.ev[d], pf.zv[d] = ed, zd
			r1, r2 := s.valueCommitments(st, d, ed, zd)
			tr.add(r1)
			tr.add(r2)
		}
	}
	pf.e = tr.challenge()
	pf.z = make([]Scalar, len(w.x))
	for i := range w.x {
		pf.z[i] = g.NewScalar().Mul(pf.e, w.x[i])
		pf.z[i].Add(pf.z[i], nonces[i])
	}
	if s.HasValues() {
		ej := pf.e.Copy()
		for d, ed := range pf.ev {
			if d != w.vIndex {
				ej.Sub(ej, ed)
			}
		}
		pf.ev[w.vIndex] = ej
		pf.zv[w.vIndex] = g.NewScalar().Mul(ej, w.gamma)
		pf.zv[w.vIndex].Add(pf.zv[w.vIndex], wv)
	}
	return pf, nil
}

// itemStatement is the public part the proof talks about.
type itemStatement struct {
	xs []Element // A_Y, A_K,1..A_K,n
	cv *Ciphertext
}

// valueCommitments recomputes branch d's commitments from (e_d, z_d):
// R1 = z·G − e·A_V, R2 = z·h_DB − e·(B_V − v_d·G).
func (s *Suite) valueCommitments(st *itemStatement, d int, ed, zd Scalar) (Element, Element) {
	g := s.g
	negE := g.NewScalar().Neg(ed)
	r1 := g.add(g.mulGen(zd), g.mul(st.cv.A, negE))
	bv := st.cv.B.Copy()
	bv.Add(bv, g.NewElement().Neg(s.valueG[d]))
	r2 := g.add(s.hDB.mul(zd), g.mul(bv, negE))
	return r1, r2
}

// verify checks the proof for the given context and ciphertext bytes.
func (s *Suite) verify(session SessionID, index uint32, cts []byte, st *itemStatement, pf *proof) error {
	g := s.g
	tr := s.newTranscript(session, index, cts)
	negE := g.NewScalar().Neg(pf.e)
	for i, x := range st.xs {
		tr.add(g.add(g.mulGen(pf.z[i]), g.mul(x, negE)))
	}
	if s.HasValues() {
		sum := g.NewScalar()
		for d := range pf.ev {
			sum.Add(sum, pf.ev[d])
			r1, r2 := s.valueCommitments(st, d, pf.ev[d], pf.zv[d])
			tr.add(r1)
			tr.add(r2)
		}
		if !sum.IsEqual(pf.e) {
			return fmt.Errorf("%w: branch challenges", ErrBadProof)
		}
	}
	if !tr.challenge().IsEqual(pf.e) {
		return ErrBadProof
	}
	return nil
}
