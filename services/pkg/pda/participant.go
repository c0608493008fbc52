package pda

import (
	"crypto/rand"
	"fmt"
	"io"
)

// Observation is one <k, v> of a participant. Value is ignored in count-only deployments
// (v ≡ 1) and must be in D otherwise.
type Observation struct {
	Key   Key
	Value uint16
}

// Participant builds submissions (spec §3.9.2 participant side, A5). It holds no secret
// beyond per-item randomness and learns nothing from the proxy but acknowledgements.
type Participant struct {
	suite *Suite
	rand  io.Reader
}

// NewParticipant returns a participant for the suite. rand nil means crypto/rand; tests
// pass a deterministic reader to pin known-answer vectors.
func NewParticipant(s *Suite, r io.Reader) *Participant {
	if r == nil {
		r = rand.Reader
	}
	return &Participant{suite: s, rand: r}
}

// Submit canonicalises nothing further (Keys are canonical by construction), drops local
// duplicates (honest-client hygiene, A5) and returns one Submission per remaining
// observation, indexed first, first+1, … in the session.
func (p *Participant) Submit(session SessionID, first uint32, obs []Observation) ([][]byte, error) {
	seen := make(map[string]bool, len(obs))
	out := make([][]byte, 0, len(obs))
	idx := first
	for _, o := range obs {
		c := string(o.Key.Canonical())
		if seen[c] {
			continue
		}
		seen[c] = true
		b, err := p.Item(session, idx, o)
		if err != nil {
			return nil, fmt.Errorf("submission %d: %w", idx, err)
		}
		out = append(out, b)
		idx++
	}
	return out, nil
}

// Item builds one Submission: C_Y = Enc_DB(H2G(w‖canon(k))), C_K = Enc_{DB·PRX}(Embed(k))
// per chunk, C_V = Enc_DB(g^v) when values are used, and the proof bound to
// (params, session, index).
func (p *Participant) Item(session SessionID, index uint32, o Observation) ([]byte, error) {
	s, g := p.suite, p.suite.g
	if o.Key.IsZero() {
		return nil, fmt.Errorf("%w: zero key", ErrInvalidKey)
	}
	w := &witness{}
	st := &itemStatement{}
	var vElem Element
	if s.HasValues() {
		i, ok := s.valueIndex(o.Value)
		if !ok {
			return nil, ErrValueNotInDomain
		}
		w.vIndex, vElem = i, s.valueG[i]
	}
	P := s.HashKey(o.Key)
	if P.IsIdentity() { // probability 2^-252; the spec asks to abort rather than encode it
		return nil, fmt.Errorf("%w: key hashes to the identity", ErrInvalidKey)
	}
	chunks, err := s.embedKey(o.Key)
	if err != nil {
		return nil, err
	}
	cts := make([]byte, 0, (2+len(chunks))*s.ctSize())
	cy, alpha, err := g.encrypt(s.hDB, P, p.rand)
	if err != nil {
		return nil, err
	}
	w.x = append(w.x, alpha)
	st.xs = append(st.xs, cy.A)
	if cts, err = g.appendCiphertext(cts, cy); err != nil {
		return nil, err
	}
	for _, m := range chunks {
		ck, beta, err := g.encrypt(s.hProd, m, p.rand)
		if err != nil {
			return nil, err
		}
		w.x = append(w.x, beta)
		st.xs = append(st.xs, ck.A)
		if cts, err = g.appendCiphertext(cts, ck); err != nil {
			return nil, err
		}
	}
	if s.HasValues() {
		r, err := g.RandomScalar(p.rand)
		if err != nil {
			return nil, err
		}
		cv := Ciphertext{g.mulGen(r), s.hDB.mul(r)}
		cv.B.Add(cv.B, vElem) // v·G + γ·h_DB; v may be 0 (identity), which is fine
		w.gamma, st.cv = r, &cv
		if cts, err = g.appendCiphertext(cts, cv); err != nil {
			return nil, err
		}
	}
	pf, err := s.prove(session, index, cts, st, w, p.rand)
	if err != nil {
		return nil, err
	}
	return s.marshalSubmission(index, cts, pf), nil
}
