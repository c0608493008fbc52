package mohito

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// Shuffler is the vendor acting as V* for a round: it removes the outer layer,
// takes part in the G2 share check, adds fakes so every vendor gets C_v + S
// entries, and emits a uniformly random permutation of the list — only after
// the round is complete (G7).
type Shuffler struct {
	Index  uint32
	params Params
	key    *PrivateKey
	pool   *FakePool
}

// NewShuffler returns the shuffler role of vendor index with private key key
// and a fake pool for the integrator's public key.
func NewShuffler(index uint32, p Params, key *PrivateKey, pool *FakePool) (*Shuffler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if key.suite != p.Suite || int(index) >= p.Vendors || pool == nil {
		return nil, fmt.Errorf("%w: shuffler key, index or pool", ErrParams)
	}
	return &Shuffler{Index: index, params: p, key: key, pool: pool}, nil
}

// OuterLayer is what V* learns from one message: the opaque inner ciphertext,
// its share of (e_v, a, c) and its response key. It never contains z, v or
// the command (spec §9.2 #10).
type OuterLayer struct {
	Inner   []byte
	Share   Share
	RespKey [KeySize]byte
}

// OpenForward is the stateless decrypt stage for one M2 (parallel by input
// index). Envelope errors (ErrSize, ErrKind, ErrRound) mean the integrator sent
// garbage and index is meaningless. ErrDecrypt or ErrNonCanonical mean the
// user's message is malformed: index is valid and the caller records the index
// as invalid with ShuffleRound.Accept(index, nil).
func (s *Shuffler) OpenForward(t uint64, m2 []byte) (uint32, *OuterLayer, error) {
	index, outer, err := ParseForward(s.params, t, m2)
	if err != nil {
		return 0, nil, err
	}
	pt, err := s.key.open(outerInfo(t, s.Index), nil, outer)
	if err != nil {
		return index, nil, err
	}
	p := s.params
	l := &OuterLayer{Inner: pt[:p.InnerSize():p.InnerSize()]}
	if l.Share, err = parseShare(pt[p.InnerSize():p.InnerSize()+p.ShufflerShareSize()], p.Vendors); err != nil {
		return index, nil, err
	}
	copy(l.RespKey[:], pt[p.InnerSize()+p.ShufflerShareSize():])
	return index, l, nil
}

type shufflePhase int

const (
	phaseCollect shufflePhase = iota
	phaseChallenged
	phaseVerdict
	phaseShuffled
)

// ShuffleRound is V*'s state for one round: π, the fake set and the response
// keys, kept for the response phase. Safe for concurrent Accept calls.
type ShuffleRound struct {
	s    *Shuffler
	info *RoundInfo
	rand io.Reader

	mu       sync.Mutex
	phase    shufflePhase
	k        int // from Close; −1 before
	received int // distinct indices accepted
	layers   []*OuterLayer
	seen     []bool
	byInner  map[[sha256.Size]byte]uint32 // digest of an inner layer → first index carrying it
	replayed int                          // indices invalidated as copies of another
	check    *CheckVector
	open2    []CheckOpening
	valid    []bool
	list     [][]byte // valid inner entries, then fakes
	listIdx  []int32  // list index → input index, −1 for a fake
	perm     []uint32 // output position → list index
	stats    ShuffleStats
	resp     [][]byte // r′ by output position
	respSeen int
}

// ShuffleStats are what V* may report about a round. S and the bursting
// vendor count are the G5 security metric.
type ShuffleStats struct {
	K, Valid, N, Fakes, S, BurstVendors int
	// Replayed counts the messages invalidated as copies of one envelope
	// (every copy, the first included).
	Replayed int
}

// NewRound starts V*'s state for round ri. rand is the permutation and
// check-seed source; nil means crypto/rand.
func (s *Shuffler) NewRound(ri *RoundInfo, rnd io.Reader) (*ShuffleRound, error) {
	if ri.Shuffler != s.Index || ri.Params != s.params {
		return nil, fmt.Errorf("%w: round %d is not ours to shuffle", ErrParams, ri.T)
	}
	// Users sealed to the round's pk_V*, and fakes must be sealed to the
	// round's pk_I, or the integrator could tell them from real entries.
	if !s.key.PublicKey().Equal(ri.ShufflerKey) {
		return nil, fmt.Errorf("%w: round %d names a shuffler key (epoch %d) that is not this shuffler's", ErrKeyEpoch, ri.T, ri.ShufflerEpoch())
	}
	if !s.pool.pkI.Equal(ri.IntegratorKey) {
		return nil, fmt.Errorf("%w: round %d names an integrator key (epoch %d) the fake pool is not for", ErrKeyEpoch, ri.T, ri.IntegratorEpoch)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	return &ShuffleRound{s: s, info: ri, rand: rnd, k: -1}, nil
}

// Accept records the outcome of OpenForward for index (layer nil: the
// message did not open and is invalid).
func (r *ShuffleRound) Accept(index uint32, layer *OuterLayer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseCollect {
		return ErrRoundClosed
	}
	if index >= MaxRoundMessages || (r.k >= 0 && int(index) >= r.k) {
		return fmt.Errorf("%w: %d", ErrIndex, index)
	}
	if int(index) >= len(r.seen) {
		n := max(int(index)+1, 2*len(r.seen))
		r.seen = append(r.seen, make([]bool, n-len(r.seen))...)
		r.layers = append(r.layers, make([]*OuterLayer, n-len(r.layers))...)
	}
	if r.seen[index] {
		return fmt.Errorf("%w: %d twice", ErrIndex, index)
	}
	r.seen[index] = true
	r.layers[index] = r.firstCopy(index, layer)
	r.received++
	return nil
}

// firstCopy returns layer, or nil (invalid) when another index of the round
// carries the same envelope: a replayed M1 — the same bytes under other
// tokens, or re-forwarded by the integrator — opens to the same layer, and
// its one-hot shares pass G2, so k copies would force a burst for the
// victim's vendor and decrypt to one (z, v) at the integrator, telling it the
// vendor. Every copy is invalidated, the first one included, so which copy
// arrived first does not matter and none reaches the shuffle. Copies are
// recognised by their inner layer ⟨m⟩_I, a fresh HPKE ciphertext per
// envelope: two honest envelopes never share it, and only V* sees it, so
// nobody can make another user's envelope collide with theirs. Callers hold
// r.mu.
func (r *ShuffleRound) firstCopy(index uint32, layer *OuterLayer) *OuterLayer {
	if layer == nil {
		return nil
	}
	if r.byInner == nil {
		r.byInner = map[[sha256.Size]byte]uint32{}
	}
	digest := sha256.Sum256(layer.Inner)
	first, dup := r.byInner[digest]
	if !dup {
		r.byInner[digest] = index
		return layer
	}
	if r.layers[first] != nil {
		r.layers[first] = nil
		r.replayed++
	}
	r.replayed++
	return nil
}

// Close records M3a (k). Forwards may still arrive afterwards; Ready reports
// when all k are in.
func (r *ShuffleRound) Close(m3 []byte) error {
	k, err := parseClose(r.info.T, m3)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.k >= 0 || r.phase != phaseCollect {
		return ErrPhase
	}
	for i := k; i < len(r.seen); i++ {
		if r.seen[i] {
			return fmt.Errorf("%w: index %d ≥ k = %d", ErrIndex, i, k)
		}
	}
	r.k = k
	return nil
}

// Ready reports whether the round is closed and all k forwards arrived.
func (r *ShuffleRound) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.k >= 0 && r.received == r.k
}

// Challenge samples the G2 check seed (after close, so every share is fixed)
// and returns V*'s first-round values (s₂, Z₂) per message.
func (r *ShuffleRound) Challenge() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.k < 0 || r.received != r.k {
		return nil, ErrRoundOpen
	}
	if r.phase != phaseCollect {
		return nil, ErrPhase
	}
	var seed CheckSeed
	if _, err := io.ReadFull(r.rand, seed[:]); err != nil {
		return nil, fmt.Errorf("sample check seed: %w", err)
	}
	p := r.s.params
	r.check = NewCheckVector(&seed, p.Vendors)
	r.open2 = make([]CheckOpening, r.k)
	b := make([]byte, checkSize(r.k, challengeRec, SeedSize))
	putHeader(b, KindCheckChallenge, r.info.T)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(r.k))
	copy(b[headerSize+4:], seed[:])
	rec := b[headerSize+4+SeedSize:]
	for i := 0; i < r.k; i++ {
		o := rec[i*challengeRec:]
		if l := r.layers[i]; l != nil {
			r.open2[i] = r.check.Open(&l.Share)
			o[0] = 1
			PutElem(o[1:], r.open2[i].S)
			PutElem(o[1+ElemSize:], r.open2[i].Z)
		}
	}
	r.phase = phaseChallenged
	return b, nil
}

// Verdict consumes the integrator's reply (s₁, Z₁, w₁), computes w₂, decides
// validity per message and returns (ok₂, w₂) so the integrator reaches the
// same decision.
func (r *ShuffleRound) Verdict(reply []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseChallenged {
		return nil, ErrPhase
	}
	rec, err := checkBody(reply, KindCheckReply, r.info.T, r.k, replyRec, 0)
	if err != nil {
		return nil, err
	}
	valid := make([]bool, r.k)
	b := make([]byte, checkSize(r.k, verdictRec, 0))
	putHeader(b, KindCheckVerdict, r.info.T)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(r.k))
	out := b[headerSize+4:]
	for i := 0; i < r.k; i++ {
		o := rec[i*replyRec:]
		ok1, err := readFlag(o[0])
		if err != nil {
			return nil, err
		}
		var s1, z1, w1 Elem
		if err := readElems(o[1:], &s1, &z1, &w1); err != nil {
			return nil, err
		}
		l := r.layers[i]
		if l == nil {
			continue // ok₂ = 0, w₂ = 0
		}
		w2 := CheckW2(z1.Add(r.open2[i].Z), &l.Share, &r.open2[i])
		valid[i] = ok1 && CheckAccept(s1, r.open2[i].S, w1, w2)
		out[i*verdictRec] = 1
		PutElem(out[i*verdictRec+1:], w2)
	}
	r.valid = valid
	r.phase = phaseVerdict
	return b, nil
}

// Finish consumes M3b (Y), computes B = Y − X₂ over the valid messages, adds
// fakes by the burst rule, samples π and returns the M4 end marker. Only
// after Finish does Output release anything (G7).
func (r *ShuffleRound) Finish(m3b []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseVerdict {
		return nil, ErrPhase
	}
	p := r.s.params
	got, err := parseHeader(m3b, KindFinish, p.FinishSize())
	if err != nil {
		return nil, err
	}
	if err := expectRound(got, r.info.T); err != nil {
		return nil, err
	}
	y := make([]Elem, p.Vendors)
	for v := range y {
		if y[v], err = ReadElem(m3b[headerSize+ElemSize*v:]); err != nil {
			return nil, err
		}
	}
	// X₂ over valid messages only (G2: rejected shares never reach the sum).
	x2 := make([]Elem, p.Vendors)
	r.list = r.list[:0]
	r.listIdx = r.listIdx[:0]
	for i := 0; i < r.k; i++ {
		if !r.valid[i] {
			continue
		}
		for v, e := range r.layers[i].Share.X {
			x2[v] = x2[v].Add(e)
		}
		r.list = append(r.list, r.layers[i].Inner)
		r.listIdx = append(r.listIdx, int32(i))
	}
	valid := len(r.list)
	b := make([]int64, p.Vendors)
	var burst int64
	bursting := 0
	for v := range b {
		b[v] = y[v].Sub(x2[v]).Signed()
		if b[v] > MaxRoundMessages || b[v] < -MaxRoundMessages {
			return nil, fmt.Errorf("%w: B_%d = %d", ErrNonCanonical, v, b[v])
		}
		if b[v] < 0 {
			burst -= b[v]
			bursting++
		}
	}
	total := int64(valid)
	fakes := make([]int64, p.Vendors)
	for v := range b {
		// Burst rule (spec §3.8): every vendor ends at C_v + S entries.
		fakes[v] = max(b[v], 0) + burst
		if b[v] < 0 {
			fakes[v] += b[v]
		}
		total += fakes[v]
	}
	if total > MaxRoundMessages {
		return nil, fmt.Errorf("%w: N = %d", ErrNonCanonical, total)
	}
	for v, n := range fakes {
		fs, err := r.s.pool.take(uint32(v), int(n), r.rand)
		if err != nil {
			return nil, err
		}
		r.list = append(r.list, fs...)
		for range fs {
			r.listIdx = append(r.listIdx, -1)
		}
	}
	if r.perm, err = randomPermutation(len(r.list), r.rand); err != nil {
		return nil, err
	}
	r.stats = ShuffleStats{K: r.k, Valid: valid, N: len(r.list), Fakes: len(r.list) - valid, S: int(burst), BurstVendors: bursting, Replayed: r.replayed}
	r.resp = make([][]byte, len(r.list))
	r.phase = phaseShuffled
	return marshalSummary(r.info.T, ShuffleSummary{N: len(r.list), S: int(burst)}), nil
}

// Stats returns the round's counts (valid after Finish).
func (r *ShuffleRound) Stats() ShuffleStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Output returns the M4 batch of output positions [start, start+count). It
// fails with ErrRoundOpen until Finish has run: V* must not emit anything
// before it holds every message and Y (spec §3.5, G7). Several senders may
// call it for disjoint ranges.
func (r *ShuffleRound) Output(start, count int) ([]byte, error) {
	r.mu.Lock()
	if r.phase != phaseShuffled {
		r.mu.Unlock()
		return nil, ErrRoundOpen
	}
	r.mu.Unlock()
	if start < 0 || count < 0 || start > len(r.perm)-count {
		return nil, fmt.Errorf("%w: output range", ErrIndex)
	}
	recs := make([][]byte, count)
	for i := range recs {
		recs[i] = r.list[r.perm[start+i]]
	}
	return marshalBatch(KindShuffled, r.info.T, start, recs, r.s.params.InnerSize())
}

// AcceptResponses records an M9 batch of r′ values by output position.
func (r *ShuffleRound) AcceptResponses(m9 []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseShuffled {
		return ErrPhase
	}
	start, recs, err := parseBatch(KindResponseLayer, r.info.T, m9, r.s.params.ResponseLayerSize(), len(r.perm))
	if err != nil {
		return err
	}
	for i, rec := range recs {
		if r.resp[start+i] != nil {
			return fmt.Errorf("%w: response position %d twice", ErrIndex, start+i)
		}
		r.resp[start+i] = append([]byte(nil), rec...)
		r.respSeen++
	}
	return nil
}

// ResponsesOut is ShuffleResponses (spec §3.7 R4 with G1): it removes V*'s
// keystream from the real positions, undoes π, drops the fakes and returns
// M10 batches covering input indices [0, k). Indices rejected as invalid get
// random bytes of the same size. All N responses must have arrived.
func (r *ShuffleRound) ResponsesOut(batch int) ([][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseShuffled || r.respSeen != len(r.perm) {
		return nil, ErrRoundOpen
	}
	vs := r.s.params.ResponseValueSize()
	out := make([][]byte, r.k)
	for pos, li := range r.perm {
		in := r.listIdx[li]
		if in < 0 {
			continue // a fake: dropped
		}
		v := r.resp[pos]
		if r.s.params.ResponseMode == ResponsePaperLiteral {
			// Paper Fig. 3: Dec_skV*; a failure leaves a random value below.
			v, _ = r.s.openPaperLayer(r.info.T, v)
		} else {
			xorRespLayer(v, &r.layers[in].RespKey, &nonceRespShuffler)
		}
		out[in] = v
	}
	for i := range out {
		if out[i] == nil {
			out[i] = make([]byte, vs)
			if _, err := io.ReadFull(r.rand, out[i]); err != nil {
				return nil, err
			}
		}
	}
	batch = max(batch, 1)
	var msgs [][]byte
	for s := 0; s < len(out) || s == 0; s += batch {
		e := min(s+batch, len(out))
		m, err := marshalBatch(KindResponseOut, r.info.T, s, out[s:e], vs)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
		if e == len(out) {
			break
		}
	}
	return msgs, nil
}
