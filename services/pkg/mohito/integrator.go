package mohito

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// Integrator holds the integrator's long-term key and parameters. Its work is
// split into stage functions so a deployment can run them in different
// processes (spec §4.5): IntegratorRound (gateway admission and the round
// coordinator: k, X₁, the G2 check, Y), OpenShuffled (decrypt workers,
// partitioned by output position), EncodeCommandTable (OKVS encoders,
// partitioned by vendor) and DecodeResponseLayer (response decoders).
type Integrator struct {
	params Params
	key    *PrivateKey
}

// NewIntegrator returns the integrator role.
func NewIntegrator(p Params, key *PrivateKey) (*Integrator, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if key.suite != p.Suite {
		return nil, fmt.Errorf("%w: key suite", ErrParams)
	}
	return &Integrator{params: p, key: key}, nil
}

// Params returns the integrator's parameters.
func (in *Integrator) Params() Params { return in.params }

// IntegratorRound is the coordinator's state for one round. C is secret to
// the integrator (G3a); only Y = C − X₁ leaves it. Admit is safe for
// concurrent use.
type IntegratorRound struct {
	params  Params
	info    *RoundInfo
	targets []uint64

	mu       sync.Mutex
	closed   bool
	seeds    []ShareSeed
	users    []string
	perUser  map[string]int
	shares   []Share
	open1    []CheckOpening
	w1       []Elem
	valid    []bool
	finished bool
	summary  *ShuffleSummary
}

// NewRound starts round ri with secret targets C (from DrawTargets).
func (in *Integrator) NewRound(ri *RoundInfo, targets []uint64) (*IntegratorRound, error) {
	if err := ri.Validate(); err != nil {
		return nil, err
	}
	if ri.Params != in.params || len(targets) != in.params.Vendors {
		return nil, fmt.Errorf("%w: round parameters or targets", ErrParams)
	}
	return &IntegratorRound{params: in.params, info: ri, targets: targets, perUser: map[string]int{}}, nil
}

// Info returns the round's public info.
func (r *IntegratorRound) Info() *RoundInfo { return r.info }

// Admit is the gateway step for M1 from an authenticated user: exact size,
// current round, at most q messages per user (spec O1, §9.3 #18). It assigns
// the next index i, keeps the x₁ seed and returns M2 for V*. Rejected
// submissions leave no trace in the round.
func (r *IntegratorRound) Admit(user string, m1 []byte) (uint32, []byte, error) {
	outer, seed, err := ParseSubmission(r.params, r.info.T, m1)
	if err != nil {
		return 0, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, nil, ErrRoundClosed
	}
	if r.perUser[user] >= r.params.Q {
		return 0, nil, ErrRateLimit
	}
	if len(r.seeds) >= MaxRoundMessages {
		return 0, nil, ErrRateLimit
	}
	index := uint32(len(r.seeds))
	m2, err := MarshalForward(r.params, r.info.T, index, outer)
	if err != nil {
		return 0, nil, err
	}
	r.perUser[user]++
	r.seeds = append(r.seeds, seed)
	r.users = append(r.users, user)
	return index, m2, nil
}

// User returns the user who sent message index i.
func (r *IntegratorRound) User(i int) string { return r.users[i] }

// K is the number of admitted messages.
func (r *IntegratorRound) K() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seeds)
}

// Close ends admission and returns M3a (k).
func (r *IntegratorRound) Close() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrPhase
	}
	r.closed = true
	return marshalClose(r.info.T, len(r.seeds)), nil
}

// Reply answers V*'s G2 challenge with (ok₁, s₁, Z₁, w₁) per message.
func (r *IntegratorRound) Reply(challenge []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := len(r.seeds)
	if !r.closed || r.shares != nil {
		return nil, ErrPhase
	}
	body, err := checkBody(challenge, KindCheckChallenge, r.info.T, k, challengeRec, SeedSize)
	if err != nil {
		return nil, err
	}
	seed := CheckSeed(body[:SeedSize])
	rec := body[SeedSize:]
	cv := NewCheckVector(&seed, r.params.Vendors)
	r.shares = make([]Share, k)
	r.open1 = make([]CheckOpening, k)
	r.w1 = make([]Elem, k)
	r.valid = make([]bool, k)
	out := make([]byte, checkSize(k, replyRec, 0))
	putHeader(out, KindCheckReply, r.info.T)
	binary.BigEndian.PutUint32(out[headerSize:], uint32(k))
	ob := out[headerSize+4:]
	for i := range k {
		o := rec[i*challengeRec:]
		ok2, err := readFlag(o[0])
		if err != nil {
			return nil, err
		}
		var s2, z2 Elem
		if err := readElems(o[1:], &s2, &z2); err != nil {
			return nil, err
		}
		r.shares[i] = r.seeds[i].Expand(r.params.Vendors)
		r.open1[i] = cv.Open(&r.shares[i])
		Z := r.open1[i].Z.Add(z2)
		r.w1[i] = CheckW1(Z, &r.shares[i], &r.open1[i])
		// valid is completed by Finish once w₂ is known.
		r.valid[i] = ok2 && r.open1[i].S.Add(s2) == 1
		w := ob[i*replyRec:]
		w[0] = 1
		PutElem(w[1:], r.open1[i].S)
		PutElem(w[1+ElemSize:], r.open1[i].Z)
		PutElem(w[1+2*ElemSize:], r.w1[i])
	}
	return out, nil
}

// Finish consumes V*'s verdict (ok₂, w₂), completes the G2 decision
// (w₁ + w₂ = 0), sums X₁ over the valid messages only and returns M3b with
// Y = C − X₁.
func (r *IntegratorRound) Finish(verdict []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := len(r.seeds)
	if r.shares == nil || r.finished {
		return nil, ErrPhase
	}
	rec, err := checkBody(verdict, KindCheckVerdict, r.info.T, k, verdictRec, 0)
	if err != nil {
		return nil, err
	}
	p := r.params
	y := make([]Elem, p.Vendors)
	for v, c := range r.targets {
		y[v] = NewElem(c)
	}
	for i := range k {
		o := rec[i*verdictRec:]
		ok2, err := readFlag(o[0])
		if err != nil {
			return nil, err
		}
		var w2 Elem
		if err := readElems(o[1:], &w2); err != nil {
			return nil, err
		}
		r.valid[i] = r.valid[i] && ok2 && r.w1[i].Add(w2) == 0
		if !r.valid[i] {
			continue
		}
		for v, e := range r.shares[i].X {
			y[v] = y[v].Sub(e)
		}
	}
	b := make([]byte, p.FinishSize())
	putHeader(b, KindFinish, r.info.T)
	for v, e := range y {
		PutElem(b[headerSize+ElemSize*v:], e)
	}
	r.finished = true
	return b, nil
}

// Valid reports whether message i passed the G2 check (after Finish).
// Invalid messages are dropped by both parties; their users get a response
// that fails to open.
func (r *IntegratorRound) Valid(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.valid != nil && r.valid[i]
}

// AcceptSummary checks V*'s end marker against the burst invariant
// N = Σ C_v + |𝒱|·S and returns the per-vendor entry counts C_v + S that the
// OKVS encoders wait for (spec §4.5 Stage C).
func (r *IntegratorRound) AcceptSummary(m []byte) (ShuffleSummary, []int, error) {
	s, err := ParseShuffleSummary(r.info.T, m)
	if err != nil {
		return s, nil, err
	}
	r.mu.Lock()
	finished := r.finished
	r.mu.Unlock()
	if !finished {
		return s, nil, ErrPhase
	}
	want := 0
	counts := make([]int, r.params.Vendors)
	for v, c := range r.targets {
		counts[v] = int(c) + s.S
		want += counts[v]
	}
	if s.N != want {
		return s, nil, fmt.Errorf("%w: N = %d, want Σ C_v + |V|·S = %d", ErrNonCanonical, s.N, want)
	}
	r.mu.Lock()
	r.summary = &s
	r.mu.Unlock()
	return s, counts, nil
}

// ShuffledCommand is one decrypted entry of the shuffled list (Stage A
// output): position, vendor, ephemeral id, device ciphertext and the
// integrator's response key. Vendor is NoVendor when the inner layer did not
// open; such a position gets a random Z and RespKey and is handled like any
// other on the response path.
type ShuffledCommand struct {
	Pos              uint32
	Vendor           uint32
	Z                EphemeralID
	DeviceCiphertext []byte
	RespKey          [KeySize]byte
}

// OpenShuffled is the decrypt-worker stage: it parses one M4 batch and opens
// every ⟨m⟩_I in it. It returns the commands and how many entries did not
// open (they are returned as NoVendor). limit is N from the summary.
func (in *Integrator) OpenShuffled(t uint64, m4 []byte, limit int, rnd io.Reader) ([]ShuffledCommand, int, error) {
	start, recs, err := parseBatch(KindShuffled, t, m4, in.params.InnerSize(), limit)
	if err != nil {
		return nil, 0, err
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	out := make([]ShuffledCommand, len(recs))
	void := 0
	for i, rec := range recs {
		if err := in.OpenInner(uint32(start+i), rec, &out[i]); err != nil {
			void++
			out[i] = ShuffledCommand{Pos: uint32(start + i), Vendor: NoVendor}
			if err := readAll(rnd, out[i].Z[:], out[i].RespKey[:]); err != nil {
				return nil, 0, err
			}
		}
	}
	return out, void, nil
}

// OpenInner decrypts one ⟨m⟩_I into dst.
func (in *Integrator) OpenInner(pos uint32, entry []byte, dst *ShuffledCommand) error {
	m, err := in.key.open([]byte(infoInner), nil, entry)
	if err != nil {
		return err
	}
	if len(m) != in.params.innerPlainSize() {
		return ErrDecrypt
	}
	dst.Pos = pos
	copy(dst.Z[:], m)
	dst.Vendor = binary.BigEndian.Uint32(m[EphemeralIDSize:])
	o := EphemeralIDSize + 4
	ctSize := in.params.DeviceCiphertextSize()
	dst.DeviceCiphertext = m[o : o+ctSize : o+ctSize]
	copy(dst.RespKey[:], m[o+ctSize:])
	if int(dst.Vendor) >= in.params.Vendors {
		return fmt.Errorf("%w: vendor %d", ErrNonCanonical, dst.Vendor)
	}
	return nil
}

// GroupByVendor is Stage B: it routes decrypted entries to their vendor.
// Entries with NoVendor are returned separately.
func GroupByVendor(cmds []ShuffledCommand, vendors int) (byVendor [][]ShuffledCommand, void []ShuffledCommand) {
	byVendor = make([][]ShuffledCommand, vendors)
	for _, c := range cmds {
		if int(c.Vendor) < vendors {
			byVendor[c.Vendor] = append(byVendor[c.Vendor], c)
		} else {
			void = append(void, c)
		}
	}
	return byVendor, void
}

// ResponseSlot is what the response path keeps for one shuffled position:
// the vendor whose response table holds it, the OKVS key actually encoded
// (z, or the random replacement of a duplicate) and k_I^resp.
type ResponseSlot struct {
	Pos     uint32
	Vendor  uint32
	Key     EphemeralID
	RespKey [KeySize]byte
}

// VoidSlot is the response slot of an entry that did not open.
func VoidSlot(c *ShuffledCommand) ResponseSlot {
	return ResponseSlot{Pos: c.Pos, Vendor: NoVendor, Key: c.Z, RespKey: c.RespKey}
}
