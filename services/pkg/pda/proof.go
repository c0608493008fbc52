package pda

import (
	"crypto/rand"
	"encoding/binary"
	"io"
)

// Fiat–Shamir proofs (spec §3.9.4, A11), in one sigma protocol with one challenge e, sent in
// commitment form so that the proxy can verify a whole submission batch at once
// (batch.go):
//
//   - multi-Schnorr: knowledge of α, β_1..β_n with A_Y = α·G and A_K,i = β_i·G, so the
//     plaintexts P = B_Y − α·h_DB and M_i = B_K,i − β_i·(h_DB+h_PRX) are extractable.
//     Commitments R_i = r_i·G, responses z_i = r_i + e·x_i; check z_i·G = R_i + e·X_i.
//   - when values are used, a CDS OR-proof that (A_V, B_V − v·G) = (γ·G, γ·h_DB) for some
//     v ∈ D, with commitments (R1_v, R2_v), branch challenges e_v summing to e and responses
//     z_v; check z_v·G = R1_v + e_v·A_V and z_v·h_DB = R2_v + e_v·(B_V − v·G). It proves
//     knowledge of γ and blocks value marking (§2.6 #8).
//
// e = H2S("PDA-V2-POK" || SHA-256(PublicParams) || session_id || item_index || ciphertexts
// || commitments), so a proof is bound to (deployment, window, keys, D) through the params
// digest and to (session, index) directly: a copied item fails in any other session or
// position (T-MAL-6). Proof bytes (submission format 2):
// R×(1+n) || [(R1_v || R2_v)×|D|] || z×(1+n) || [z_v×|D|] || [e_v×(|D|−1)]; the last
// branch challenge is e − Σ e_v, so no redundant field is sent. Commitments are canonical
// non-identity elements (DecodeElement), hashed exactly as received.

type proof struct {
	r      []Element // R_α, R_β1..R_βn
	z      []Scalar  // z_α, z_β1..z_βn
	r1, r2 []Element // per value branch
	zv     []Scalar  // per value branch
	ev     []Scalar  // per value branch; the last is derived
	rb     []byte    // encoded commitments, as hashed into the challenge
}

func (s *Suite) challenge(session SessionID, index uint32, cts, commitments []byte) Scalar {
	b := make([]byte, 0, len(labelProof)+32+SessionIDSize+4+len(cts)+len(commitments))
	b = append(b, labelProof...)
	b = append(b, s.digest[:]...)
	b = append(b, session[:]...)
	b = binary.BigEndian.AppendUint32(b, index)
	b = append(b, cts...)
	b = append(b, commitments...)
	return s.g.HashToScalar(b, dstHashToScalar)
}

// witness is what the participant knows about one item.
type witness struct {
	x      []Scalar // α, β_1..β_n
	gamma  Scalar   // value randomness (values mode)
	vIndex int      // index of v in D
}

// prove builds the proof for an item whose ciphertext bytes are cts.
func (s *Suite) prove(session SessionID, index uint32, cts []byte, st *itemStatement, w *witness, rand io.Reader) (*proof, error) {
	g := s.g
	pf := &proof{r: make([]Element, len(w.x))}
	nonces := make([]Scalar, len(w.x))
	for i := range nonces {
		r, err := g.RandomScalar(rand)
		if err != nil {
			return nil, err
		}
		nonces[i], pf.r[i] = r, g.mulGen(r) // r ≠ 0, so R ≠ identity
	}
	var wv Scalar
	if s.HasValues() {
		nD := len(s.params.Values)
		pf.r1, pf.r2 = make([]Element, nD), make([]Element, nD)
		pf.ev, pf.zv = make([]Scalar, nD), make([]Scalar, nD)
		for d := range nD {
			if d == w.vIndex {
				r, err := g.RandomScalar(rand)
				if err != nil {
					return nil, err
				}
				wv, pf.r1[d], pf.r2[d] = r, g.mulGen(r), s.hDB.mul(r)
				continue
			}
			// Simulated branch: pick (e_d, z_d) and solve for the commitments; redraw in the
			// negligible case that one is the identity, which has no encoding.
			for {
				ed, err := g.RandomScalar(rand)
				if err != nil {
					return nil, err
				}
				zd, err := g.RandomScalar(rand)
				if err != nil {
					return nil, err
				}
				r1, r2 := s.valueCommitments(st, d, ed, zd)
				if !r1.IsIdentity() && !r2.IsIdentity() {
					pf.ev[d], pf.zv[d], pf.r1[d], pf.r2[d] = ed, zd, r1, r2
					break
				}
			}
		}
	}
	rb := make([]byte, 0, s.commitmentsSize())
	for _, r := range pf.r {
		rb, _ = g.AppendElement(rb, r)
	}
	for d := range pf.r1 {
		rb, _ = g.AppendElement(rb, pf.r1[d])
		rb, _ = g.AppendElement(rb, pf.r2[d])
	}
	pf.rb = rb
	e := s.challenge(session, index, cts, rb)
	pf.z = make([]Scalar, len(w.x))
	for i := range w.x {
		pf.z[i] = g.NewScalar().Mul(e, w.x[i])
		pf.z[i].Add(pf.z[i], nonces[i])
	}
	if s.HasValues() {
		ej := e.Copy()
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

// valueCommitments computes a simulated branch's commitments from (e_d, z_d):
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

// term is s·p, or p alone when s is nil (the negated commitments, whose coefficient is 1
// and so becomes a short 128-bit weight in a batch).
type term struct {
	s Scalar
	p Element
}

// linEq is the verification equation cG·G + cH·h_DB + Σ terms = identity. Every check of a
// proof has this form.
type linEq struct {
	cG, cH Scalar // nil means zero
	terms  []term
}

// equations returns the verification equations of a parsed submission's proof in session.
// They hold iff the proof verifies (the challenge is recomputed from the received bytes).
func (s *Suite) equations(session SessionID, sub *Submission) []linEq {
	g, pf := s.g, sub.proof
	e := s.challenge(session, sub.Index, sub.cts, pf.rb)
	negE := g.NewScalar().Neg(e)
	xs := s.statement(sub).xs
	eqs := make([]linEq, 0, len(xs)+2*len(pf.zv))
	// z_i·G − e·X_i − R_i = 0
	for i, x := range xs {
		eqs = append(eqs, linEq{cG: pf.z[i], terms: []term{{negE, x}, {nil, g.NewElement().Neg(pf.r[i])}}})
	}
	if s.HasValues() {
		last := len(pf.zv) - 1
		pf.ev[last] = e.Copy()
		for d := range last {
			pf.ev[last].Sub(pf.ev[last], pf.ev[d])
		}
		for d := range pf.zv {
			negEd := g.NewScalar().Neg(pf.ev[d])
			// z_d·G − e_d·A_V − R1_d = 0
			eqs = append(eqs, linEq{cG: pf.zv[d], terms: []term{{negEd, sub.CV.A}, {nil, g.NewElement().Neg(pf.r1[d])}}})
			// z_d·h_DB − e_d·B_V + e_d·v_d·G − R2_d = 0
			cG := g.NewScalar().SetUint64(uint64(s.params.Values[d]))
			cG.Mul(cG, pf.ev[d])
			eqs = append(eqs, linEq{cG: cG, cH: pf.zv[d], terms: []term{{negEd, sub.CV.B}, {nil, g.NewElement().Neg(pf.r2[d])}}})
		}
	}
	return eqs
}

// holds evaluates one equation exactly.
func (s *Suite) holds(eq *linEq) bool {
	g := s.g
	acc := g.NewElement()
	if eq.cG != nil && !eq.cG.IsZero() {
		acc.Add(acc, g.mulGen(eq.cG))
	}
	if eq.cH != nil && !eq.cH.IsZero() {
		acc.Add(acc, s.hDB.mul(eq.cH))
	}
	for _, t := range eq.terms {
		if t.s == nil {
			acc.Add(acc, t.p)
		} else {
			acc.Add(acc, g.mul(t.p, t.s))
		}
	}
	return acc.IsIdentity()
}

// verify checks one submission's proof on its own (exactly, no randomness).
func (s *Suite) verify(session SessionID, sub *Submission) error {
	eqs := s.equations(session, sub)
	for i := range eqs {
		if !s.holds(&eqs[i]) {
			return ErrBadProof
		}
	}
	return nil
}

// batchVerify checks the equations of many proofs at once with the small-exponent test:
// each equation E_k gets an independent uniform weight w_k ∈ [1, 2^128) from crypto/rand,
// drawn after every proof is fixed, and Σ w_k·E_k = identity is checked with one
// multi-scalar multiplication. If every equation holds it returns true; if any fails it
// returns false except with probability ≤ 1/(2^128 − 1) (prime-order group, see doc.go).
func (s *Suite) batchVerify(items [][]linEq) bool {
	g := s.g
	n := 0
	for _, eqs := range items {
		n += len(eqs)
	}
	ws := randomWeights(g, n, rand.Reader)
	cG, cH := g.NewScalar(), g.NewScalar()
	var scs []Scalar
	var pts []Element
	k := 0
	tmp := g.NewScalar()
	for _, eqs := range items {
		for i := range eqs {
			w := ws[k]
			k++
			if eqs[i].cG != nil {
				cG.Add(cG, tmp.Mul(w, eqs[i].cG))
			}
			if eqs[i].cH != nil {
				cH.Add(cH, tmp.Mul(w, eqs[i].cH))
			}
			for _, t := range eqs[i].terms {
				if t.s == nil {
					scs = append(scs, w)
				} else {
					scs = append(scs, g.NewScalar().Mul(w, t.s))
				}
				pts = append(pts, t.p)
			}
		}
	}
	acc := g.msm(scs, pts)
	if !cG.IsZero() {
		acc.Add(acc, g.mulGen(cG))
	}
	if !cH.IsZero() {
		acc.Add(acc, s.hDB.mul(cH))
	}
	return acc.IsIdentity()
}

// randomWeights draws n uniform scalars in [1, 2^128). A weight of zero would drop its
// equation from the check, so zero is redrawn (probability 2^-128 per draw).
func randomWeights(g *Group, n int, r io.Reader) []Scalar {
	buf := make([]byte, 16*n)
	if _, err := io.ReadFull(r, buf); err != nil {
		panic("pda: crypto/rand failed: " + err.Error()) // crypto/rand.Read never fails since Go 1.24
	}
	ws := make([]Scalar, n)
	var enc [32]byte
	for i := range ws {
		w := buf[16*i : 16*i+16]
		for isZero(w) {
			if _, err := io.ReadFull(r, w); err != nil {
				panic("pda: crypto/rand failed: " + err.Error())
			}
		}
		clear(enc[:])
		if g.scalarTopByte == 0 { // big-endian (P-256)
			copy(enc[16:], w)
		} else {
			copy(enc[:16], w)
		}
		ws[i] = g.NewScalar()
		if err := ws[i].UnmarshalBinary(enc[:g.scalarSize]); err != nil || ws[i].IsZero() {
			panic("pda: weight encoding") // < 2^128 < group order: unreachable
		}
	}
	return ws
}

func isZero(b []byte) bool {
	var acc byte
	for _, x := range b {
		acc |= x
	}
	return acc == 0
}
