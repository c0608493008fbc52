package pda

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
)

// DedupKeySize is the length of K_dedup.
const DedupKeySize = 32

// ProxyKeys are the proxy domain's secrets for one window (spec §3.9.1): the OPRF key s,
// the oracle's ElGamal key a_PRX and K_dedup. They never leave the proxy domain.
type ProxyKeys struct {
	OPRF   Scalar
	Oracle *PrivateKey
	Dedup  [DedupKeySize]byte
}

// GenerateProxyKeys draws fresh proxy keys.
func GenerateProxyKeys(g *Group, r io.Reader) (*ProxyKeys, error) {
	if r == nil {
		r = rand.Reader
	}
	s, err := g.RandomScalar(r)
	if err != nil {
		return nil, err
	}
	o, err := GenerateKey(g, r)
	if err != nil {
		return nil, err
	}
	k := &ProxyKeys{OPRF: s, Oracle: o}
	if _, err := io.ReadFull(r, k.Dedup[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRandomness, err)
	}
	return k, nil
}

// Proxy is the client-facing proxy stage (spec §3.9.2 proxy side, A6). It is stateless
// apart from its keys; per-participant state lives in Session.
type Proxy struct {
	suite *Suite
	keys  *ProxyKeys
	rand  io.Reader
}

// NewProxy checks that keys match the suite's h_PRX.
func NewProxy(s *Suite, keys *ProxyKeys, r io.Reader) (*Proxy, error) {
	if r == nil {
		r = rand.Reader
	}
	if keys == nil || keys.OPRF == nil || keys.OPRF.IsZero() || keys.Oracle == nil {
		return nil, fmt.Errorf("%w: missing proxy keys", ErrInvalidParams)
	}
	if string(keys.Oracle.pub) != string(s.params.ProxyKey) {
		return nil, fmt.Errorf("%w: oracle key does not match h_PRX", ErrInvalidParams)
	}
	return &Proxy{suite: s, keys: keys, rand: r}, nil
}

// Session is one authenticated participant session at the proxy. The participant id is
// used only to derive the dedup scalar t_j and never leaves the proxy domain.
type Session struct {
	id       SessionID
	tag      Scalar // t_j (distinct-participants mode)
	accepted map[uint32]bool
}

// OpenSession starts a session for an authenticated participant (its mTLS identity) with
// a session id the proxy chose; the participant must bind its proofs to that id.
func (p *Proxy) OpenSession(participantID []byte, id SessionID) *Session {
	sess := &Session{id: id, accepted: make(map[uint32]bool)}
	if p.suite.hasTag() {
		sess.tag = p.dedupScalar(participantID)
	}
	return sess
}

// dedupScalar is t_j = H2S(K_dedup || window || participant_id) (§3.9.6), with the
// inputs length-prefixed so no two (window, id) pairs share a hash input.
func (p *Proxy) dedupScalar(participantID []byte) Scalar {
	msg := make([]byte, 0, len(labelDedup)+DedupKeySize+8+4+len(participantID))
	msg = append(msg, labelDedup...)
	msg = append(msg, p.keys.Dedup[:]...)
	msg = binary.BigEndian.AppendUint64(msg, p.suite.params.Window)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(participantID)))
	msg = append(msg, participantID...)
	t := p.suite.g.HashToScalar(msg, dstHashToScalar)
	if t.IsZero() { // probability 2^-252; a zero tag would collapse all of j's keys
		t.SetUint64(1)
	}
	return t
}

// Rejection says why the proxy dropped a submission. It is all a participant gets back
// besides the acceptance count: no group element, no scalar (T-PRIV-9).
type Rejection struct {
	Position int   // position in the Ingest batch
	Err      error // wraps ErrMalformed, ErrInvalidElement, ErrInvalidScalar, ErrBadProof or ErrReplay
}

// Ingest verifies a batch of submissions from one session and returns the BlindedItems of
// the accepted ones (encoded, in input order; the mixer shuffles) and the rejections.
//
// The proofs of the batch are verified together (batchVerify: random 128-bit weights, one
// multi-scalar multiplication); if that check fails, every proof is verified on its own,
// so a bad item rejects only itself and is reported at its position. The outcome is the
// same as verifying each item in turn, including replays within the batch.
func (p *Proxy) Ingest(sess *Session, items [][]byte) (blinded [][]byte, rejected []Rejection) {
	s := p.suite
	subs := make([]*Submission, len(items))
	errs := make([]error, len(items))
	var eqs [][]linEq
	var idx []int
	for i, raw := range items {
		sub, err := s.ParseSubmission(raw)
		if err != nil {
			errs[i] = err
			continue
		}
		subs[i] = sub
		if sess.accepted[sub.Index] {
			continue // a replay whatever its proof says
		}
		eqs = append(eqs, s.equations(sess.id, sub))
		idx = append(idx, i)
	}
	batched := len(idx) > 1 && s.g.id == Ristretto255
	if !batched || !s.batchVerify(eqs) {
		for k, i := range idx {
			if !s.holdsAll(eqs[k]) {
				errs[i] = ErrBadProof
			}
		}
	}
	for i, sub := range subs {
		err := errs[i]
		if err == nil && sess.accepted[sub.Index] {
			err = fmt.Errorf("%w: index %d", ErrReplay, sub.Index)
		}
		var b []byte
		if err == nil {
			b, err = p.blind(sess, sub)
		}
		if err != nil {
			rejected = append(rejected, Rejection{Position: i, Err: err})
			continue
		}
		sess.accepted[sub.Index] = true
		blinded = append(blinded, b)
	}
	return blinded, rejected
}

// holdsAll checks one proof's equations exactly.
func (s *Suite) holdsAll(eqs []linEq) bool {
	for i := range eqs {
		if !s.holds(&eqs[i]) {
			return false
		}
	}
	return true
}

// blind turns a verified submission into an encoded BlindedItem.
func (p *Proxy) blind(sess *Session, sub *Submission) ([]byte, error) {
	s, g := p.suite, p.suite.g
	// C_Y' = s·C_Y + ρ1·(G, h_DB) = E_DB(Y) with fresh randomness, Y = s·H2G(·) = F_s(k).
	sA, sB := g.mul(sub.CY.A, p.keys.OPRF), g.mul(sub.CY.B, p.keys.OPRF)
	if sA.IsIdentity() || sB.IsIdentity() { // impossible for decoded non-identity inputs
		return nil, fmt.Errorf("%w: degenerate C_Y", ErrInvalidElement)
	}
	cy, err := g.rerandomize(s.hDB, Ciphertext{sA, sB}, p.rand)
	if err != nil {
		return nil, err
	}
	it := &BlindedItem{Window: s.params.Window, CY: cy, CK: make([]Ciphertext, len(sub.CK))}
	for i, c := range sub.CK {
		// The inner layer is re-randomised with the product key (§3.1 [!]), so after the
		// DB strips its layer E_PRX(k) carries randomness the participant does not know.
		if it.CK[i], err = g.rerandomize(s.hProd, c, p.rand); err != nil {
			return nil, err
		}
	}
	if sub.CV != nil {
		cv, err := g.rerandomize(s.hDB, *sub.CV, p.rand)
		if err != nil {
			return nil, err
		}
		it.CV = &cv
	}
	if s.hasTag() {
		// C_T = t_j·C_Y' + ρ4·(G, h_DB) = E_DB(Y^{t_j}) (§3.9.6).
		ct, err := g.rerandomize(s.hDB, Ciphertext{g.mul(cy.A, sess.tag), g.mul(cy.B, sess.tag)}, p.rand)
		if err != nil {
			return nil, err
		}
		it.CT = &ct
	}
	return s.marshalBlindedItem(it)
}

// Shuffle permutes items uniformly (Fisher–Yates over rand, crypto/rand when nil): the
// mixer's flush (A7). Arrival order must never reach the DB.
func Shuffle(items [][]byte, r io.Reader) error { return permute(items, r) }

func permute[T any](xs []T, r io.Reader) error {
	if r == nil {
		r = rand.Reader
	}
	for i := len(xs) - 1; i > 0; i-- {
		j, err := rand.Int(r, big.NewInt(int64(i+1)))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRandomness, err)
		}
		xs[i], xs[j.Int64()] = xs[j.Int64()], xs[i]
	}
	return nil
}
