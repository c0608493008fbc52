package mohito

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// Asynchronous responses (spec §3.9, App. A, O15). A device may answer a
// round-t command in round t+lag, 1 ≤ lag ≤ W. To keep every size and count
// independent of which devices answer late:
//
//   - every active device sends M7L every round: for each lag 1..W and slot
//     1..q a record (z_{j,t−lag}, value), a real late answer or random bytes;
//   - every vendor encodes all W·q·|𝒟_a| records into one late OKVS (M8L)
//     padded like the synchronous table (G6, O11);
//   - for every retained round t the integrator decodes every shuffled
//     position of t (fakes included, no failure possible), V* of round t
//     unshuffles all of them, and the integrator sends one M11L to every user
//     of round t (the paper accepts this overhead);
//   - I keeps (slots, users) and V* keeps (π, fake set, k_V*^resp) for W
//     rounds, then drops them (LateResponses).
//
// The server layers of a late answer are XSalsa20 keystreams under the same
// one-time keys k_I^resp, k_V*^resp as the synchronous answer but with a
// nonce that carries the lag, so no keystream is ever used twice; V* accepts
// each lag of a round at most once for the same reason. No public-key
// operation happens on the late path, so key-epoch rotation (O16) needs no
// old private key here: the only key material kept for W rounds is the
// per-command response keys, and they are zeroed when the round is dropped.

// AsyncWindow is W, the number of rounds after round t in which a device may
// still answer a round-t command. 0 disables asynchronous responses (the
// synchronous protocol, unchanged); the late functions reject it.
type AsyncWindow int

// MaxAsyncWindow bounds W: every round costs W extra response passes.
const MaxAsyncWindow = 16

// Validate checks that w enables asynchronous responses for p.
func (w AsyncWindow) Validate(p Params) error {
	if w < 1 || w > MaxAsyncWindow {
		return fmt.Errorf("%w: asynchronous window %d not in [1, %d]", ErrParams, w, MaxAsyncWindow)
	}
	if p.ResponseMode != ResponseHardened {
		return fmt.Errorf("%w: asynchronous responses need the hardened response mode", ErrParams)
	}
	return p.Validate()
}

// Lag returns current − t if round t is inside the window at round current
// (1 ≤ lag ≤ W), ErrLateWindow otherwise.
func (w AsyncWindow) Lag(t, current uint64) (int, error) {
	if current <= t || current-t > uint64(max(w, 0)) {
		return 0, fmt.Errorf("%w: round %d at round %d, window %d", ErrLateWindow, t, current, w)
	}
	return int(current - t), nil
}

// lateNonce separates the keystream of each lag from the synchronous one
// (lag 0 is the synchronous nonce itself).
func lateNonce(base *[24]byte, lag int) [24]byte {
	n := *base
	binary.BigEndian.PutUint32(n[20:], uint32(lag))
	return n
}

// ---- device (M7L) ----

// LateAnswer is a response a device gives in a later round to a command that
// arrived in round T.
type LateAnswer struct {
	T       uint64     // round the command arrived in
	Slot    DeviceSlot // the slot as ReceiveCommands returned it, Command set
	Payload []byte
}

// Defer takes the command out of s, so that Respond answers the slot with
// random bytes exactly like a slot without a command, and returns a copy of
// the slot for RespondLate.
func (s *DeviceSlot) Defer() DeviceSlot {
	c := *s
	s.Command = nil
	return c
}

// LateDeviceResponseSize is |M7L| = header ‖ W·q × (z ‖ response value).
func (p Params) LateDeviceResponseSize(w AsyncWindow) int {
	return headerSize + int(w)*p.Q*(EphemeralIDSize+p.ResponseValueSize())
}

// RespondLate builds M7L for round t, which the device sends every round it
// is active: for each lag 1..W and slot j a record (z_{j,t−lag}, value). A
// slot named by an answer carries ⟨r⟩_D ⊕ XSalsa20(k_V*^resp, lag) ⊕
// XSalsa20(k_I^resp, lag); every other slot carries random bytes of the same
// length. Answers outside the window are not sent; their number is returned
// as dropped (the user gets nothing and retries, spec O11).
func (d *Device) RespondLate(t uint64, w AsyncWindow, answers []LateAnswer, rnd io.Reader) ([]byte, int, error) {
	p := d.params
	if err := w.Validate(p); err != nil {
		return nil, 0, err
	}
	q := p.Q
	byRec := make([]*LateAnswer, int(w)*q)
	dropped := 0
	for i := range answers {
		a := &answers[i]
		lag, err := w.Lag(a.T, t)
		if err != nil {
			dropped++
			continue
		}
		if a.Slot.Command == nil || a.Slot.J < 1 || int(a.Slot.J) > q {
			return nil, 0, fmt.Errorf("%w: late answer without a command in slot %d", ErrParams, a.Slot.J)
		}
		r := (lag-1)*q + int(a.Slot.J) - 1
		if byRec[r] != nil {
			return nil, 0, fmt.Errorf("%w: two late answers for slot %d of round %d", ErrIndex, a.Slot.J, a.T)
		}
		byRec[r] = a
	}
	rs := EphemeralIDSize + p.ResponseValueSize()
	m := make([]byte, p.LateDeviceResponseSize(w))
	putHeader(m, KindLateDeviceResponse, t)
	for r, a := range byRec {
		lag, j := r/q+1, uint32(r%q+1)
		rec := m[headerSize+r*rs : headerSize+(r+1)*rs]
		z := d.ids.Derive(j, t-uint64(lag))
		copy(rec, z[:])
		val := rec[EphemeralIDSize:]
		if a == nil {
			if _, err := io.ReadFull(rnd, val); err != nil {
				return nil, 0, err
			}
			continue
		}
		pt, err := d.response(&a.Slot, a.Payload)
		if err != nil {
			return nil, 0, err
		}
		ct, err := sealDevice(&d.keys.AE, aadResponse, &z, pt, rnd)
		if err != nil {
			return nil, 0, err
		}
		copy(val, ct)
		nv, ni := lateNonce(&nonceRespShuffler, lag), lateNonce(&nonceRespIntegrator, lag)
		xorRespLayer(val, &a.Slot.Command.ShufflerRespKey, &nv)
		xorRespLayer(val, &a.Slot.Command.IntegratorRespKey, &ni)
	}
	return m, dropped, nil
}

// ---- vendor (M7L → M8L) ----

// vendorLate is a VendorRound's late-response state: the W·q ids of every
// active device (active i, lag, j at (i·W + lag − 1)·q + j − 1).
type vendorLate struct {
	w    AsyncWindow
	ids  []EphemeralID
	resp [][]byte
}

func (vr *VendorRound) lateState(w AsyncWindow) (*vendorLate, error) {
	p := vr.v.params
	if err := w.Validate(p); err != nil {
		return nil, err
	}
	if vr.late != nil {
		if vr.late.w != w {
			return nil, fmt.Errorf("%w: window %d, round uses %d", ErrParams, w, vr.late.w)
		}
		return vr.late, nil
	}
	q, t := p.Q, vr.info.T
	l := &vendorLate{w: w, ids: make([]EphemeralID, len(vr.active)*int(w)*q)}
	for i, d := range vr.active {
		for lag := 1; lag <= int(w); lag++ {
			for j := 1; j <= q; j++ {
				l.ids[(i*int(w)+lag-1)*q+j-1] = vr.v.devices[d].Derive(uint32(j), t-uint64(lag))
			}
		}
	}
	l.resp = make([][]byte, len(l.ids))
	vr.late = l
	return l, nil
}

// LateDecodePattern returns the late OKVS keys of the round in order: W·q
// per active device, derived from the device keys and t only.
func (vr *VendorRound) LateDecodePattern(w AsyncWindow) ([]EphemeralID, error) {
	l, err := vr.lateState(w)
	if err != nil {
		return nil, err
	}
	return l.ids, nil
}

// AcceptLateResponse records M7L from the device at position i of Active.
// Every record must carry the id the vendor derived for that device, lag and
// slot.
func (vr *VendorRound) AcceptLateResponse(i int, w AsyncWindow, m7l []byte) error {
	l, err := vr.lateState(w)
	if err != nil {
		return err
	}
	p := vr.v.params
	if i < 0 || i >= len(vr.active) {
		return fmt.Errorf("%w: active position %d", ErrIndex, i)
	}
	t, err := parseHeader(m7l, KindLateDeviceResponse, p.LateDeviceResponseSize(w))
	if err != nil {
		return err
	}
	if err := expectRound(t, vr.info.T); err != nil {
		return err
	}
	n, rs := int(w)*p.Q, EphemeralIDSize+p.ResponseValueSize()
	for r := range n {
		rec := m7l[headerSize+r*rs:]
		if EphemeralID(rec[:EphemeralIDSize]) != l.ids[i*n+r] {
			return fmt.Errorf("%w: late record %d has a foreign id", ErrNonCanonical, r)
		}
	}
	for r := range n {
		rec := m7l[headerSize+r*rs+EphemeralIDSize : headerSize+(r+1)*rs]
		l.resp[i*n+r] = append([]byte(nil), rec...)
	}
	return nil
}

// LateResponseCapacity is the public capacity of a vendor's late table:
// ResponseCapacity(W·q·|𝒟_a|, quantum).
func LateResponseCapacity(p Params, w AsyncWindow, active, quantum int) int {
	return ResponseCapacity(int(w)*p.Q*active, quantum)
}

// EncodeLateResponses is the late V.EncodeResponses: one OKVS over the W·q
// late records of every active device (random values for devices that sent
// no M7L), padded to LateResponseCapacity. Its size depends only on |𝒟_a|.
func (vr *VendorRound) EncodeLateResponses(w AsyncWindow, quantum int, rnd io.Reader) (*okvs.Table, int, error) {
	l, err := vr.lateState(w)
	if err != nil {
		return nil, 0, err
	}
	return vr.v.encodeResponsePairs(l.ids, l.resp, quantum, rnd)
}

// ParseLateResponseTable is the integrator's decoder of M8L; the capacity
// rule is that of ParseResponseTable.
func ParseLateResponseTable(p Params, t uint64, v uint32, quantum, maxCapacity int, b []byte) (*okvs.Table, int, error) {
	return parseTableEnvelope(KindLateResponseTable, t, v, b, p.ResponseValueSize(), func(c int) bool {
		return c >= 1 && c <= maxCapacity && c%max(quantum, 1) == 0
	})
}

// ---- integrator (retained round, M8L → M9L, M10L → M11L) ----

// LateRound is what the integrator keeps of round t for its window: the
// response slot of every shuffled position (vendor, OKVS key, k_I^resp) and
// the user of every input index. Drop zeroes the keys.
type LateRound struct {
	params   Params
	w        AsyncWindow
	t        uint64
	shuffler uint32
	n        int
	byVendor [][]ResponseSlot // index |𝒱| holds the void positions
	users    []string
}

// Retain keeps round r's response state for w rounds. slots must hold the
// slot of every shuffled position [0, N) exactly once: the slots returned by
// EncodeCommandTable for every vendor plus VoidSlot for entries that did not
// open. Call it after AcceptSummary.
func (r *IntegratorRound) Retain(w AsyncWindow, slots []ResponseSlot) (*LateRound, error) {
	if err := w.Validate(r.params); err != nil {
		return nil, err
	}
	r.mu.Lock()
	sum, users := r.summary, slices.Clone(r.users)
	r.mu.Unlock()
	if sum == nil {
		return nil, ErrPhase
	}
	if len(slots) != sum.N {
		return nil, fmt.Errorf("%w: %d slots for N = %d", ErrIndex, len(slots), sum.N)
	}
	vendors := r.params.Vendors
	lr := &LateRound{params: r.params, w: w, t: r.info.T, shuffler: r.info.Shuffler, n: sum.N,
		byVendor: make([][]ResponseSlot, vendors+1), users: users}
	seen := make([]bool, sum.N)
	for _, s := range slots {
		if int(s.Pos) >= sum.N || seen[s.Pos] {
			return nil, fmt.Errorf("%w: slot position %d missing or twice", ErrIndex, s.Pos)
		}
		seen[s.Pos] = true
		v := vendors
		if int(s.Vendor) < vendors {
			v = int(s.Vendor)
		}
		lr.byVendor[v] = append(lr.byVendor[v], s)
	}
	return lr, nil
}

// T is the retained round.
func (lr *LateRound) T() uint64 { return lr.t }

// Shuffler is V* of the retained round, the party that unshuffles its late
// responses.
func (lr *LateRound) Shuffler() uint32 { return lr.shuffler }

// N is the number of shuffled positions.
func (lr *LateRound) N() int { return lr.n }

// K is the number of input indices (users' messages).
func (lr *LateRound) K() int { return len(lr.users) }

// User returns the user who sent input index i.
func (lr *LateRound) User(i int) string { return lr.users[i] }

// Lag returns current − t, or ErrLateWindow once the round has left the
// window (its state must then be dropped).
func (lr *LateRound) Lag(current uint64) (int, error) { return lr.w.Lag(lr.t, current) }

// Slots returns the retained slots of vendor v, for response decoders
// partitioned by vendor (DecodeLateResponseLayer).
func (lr *LateRound) Slots(v uint32) []ResponseSlot {
	if int(v) >= lr.params.Vendors {
		return nil
	}
	return lr.byVendor[v]
}

// DecodeLateResponseLayer is the response-decoder stage for one vendor's late
// table: DecodeResponseLayer with the keystream of the given lag. As on the
// synchronous path there is no failure and no branch on validity.
func DecodeLateResponseLayer(p Params, table *okvs.Table, slots []ResponseSlot, lag int, out [][]byte) error {
	if lag < 1 || lag > MaxAsyncWindow {
		return fmt.Errorf("%w: lag %d", ErrParams, lag)
	}
	n := lateNonce(&nonceRespIntegrator, lag)
	return decodeResponseLayer(p, table, slots, &n, out)
}

// DecodeLate computes r′ for every shuffled position of the retained round at
// round current from the vendors' late tables (tables[v] from
// ParseLateResponseTable): positions of vendor v are decoded in v's table and
// stripped of the k_I^resp keystream of the lag; positions that did not open
// get random bytes. Every position yields a value, real or fake alike.
func (lr *LateRound) DecodeLate(current uint64, tables []*okvs.Table, rnd io.Reader) ([][]byte, error) {
	lag, err := lr.Lag(current)
	if err != nil {
		return nil, err
	}
	if len(tables) != lr.params.Vendors {
		return nil, fmt.Errorf("%w: %d late tables", ErrParams, len(tables))
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	out := make([][]byte, lr.n)
	for v, slots := range lr.byVendor[:lr.params.Vendors] {
		vals := make([][]byte, len(slots))
		if err := DecodeLateResponseLayer(lr.params, tables[v], slots, lag, vals); err != nil {
			return nil, fmt.Errorf("decode late responses of vendor %d for round %d: %w", v, lr.t, err)
		}
		for i, s := range slots {
			out[s.Pos] = vals[i]
		}
	}
	for _, s := range lr.byVendor[lr.params.Vendors] {
		if out[s.Pos], err = VoidResponseLayer(lr.params, rnd); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Drop zeroes the retained response keys and forgets the round.
func (lr *LateRound) Drop() {
	for _, slots := range lr.byVendor {
		for i := range slots {
			clear(slots[i].RespKey[:])
		}
	}
	lr.byVendor, lr.users, lr.n = nil, nil, 0
}

// Late batches (M9L, M10L) are header(t of the pending round) ‖ lag(4) ‖
// start(4) ‖ count(4) ‖ count × record.
const lateBatchHeader = headerSize + 12

func marshalLateBatch(kind Kind, t uint64, lag, start int, recs [][]byte, recSize int) ([]byte, error) {
	if lag < 1 || lag > MaxAsyncWindow {
		return nil, fmt.Errorf("%w: lag %d", ErrParams, lag)
	}
	b := make([]byte, lateBatchHeader+len(recs)*recSize)
	putHeader(b, kind, t)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(lag))
	binary.BigEndian.PutUint32(b[headerSize+4:], uint32(start))
	binary.BigEndian.PutUint32(b[headerSize+8:], uint32(len(recs)))
	o := lateBatchHeader
	for _, r := range recs {
		if len(r) != recSize {
			return nil, fmt.Errorf("%w: record of %d bytes, want %d", ErrSize, len(r), recSize)
		}
		o += copy(b[o:], r)
	}
	return b, nil
}

func parseLateBatch(kind Kind, t uint64, b []byte, recSize, limit int) (lag, start int, recs [][]byte, err error) {
	if len(b) < lateBatchHeader {
		return 0, 0, nil, fmt.Errorf("%w: late batch of %d bytes", ErrSize, len(b))
	}
	lag = int(binary.BigEndian.Uint32(b[headerSize:]))
	start = int(binary.BigEndian.Uint32(b[headerSize+4:]))
	count := int(binary.BigEndian.Uint32(b[headerSize+8:]))
	if count > limit || start > limit-count {
		return 0, 0, nil, fmt.Errorf("%w: late batch [%d, %d+%d) outside [0, %d)", ErrIndex, start, start, count, limit)
	}
	got, err := parseHeader(b, kind, lateBatchHeader+count*recSize)
	if err != nil {
		return 0, 0, nil, err
	}
	if err := expectRound(got, t); err != nil {
		return 0, 0, nil, err
	}
	if lag < 1 || lag > MaxAsyncWindow {
		return 0, 0, nil, fmt.Errorf("%w: lag %d", ErrNonCanonical, lag)
	}
	recs = make([][]byte, count)
	for i := range recs {
		o := lateBatchHeader + i*recSize
		recs[i] = b[o : o+recSize : o+recSize]
	}
	return lag, start, recs, nil
}

// MarshalLateResponseLayer builds an M9L batch: late r′ values of round t at
// shuffled positions [start, start+len(values)), for the given lag.
func MarshalLateResponseLayer(p Params, t uint64, lag, start int, values [][]byte) ([]byte, error) {
	return marshalLateBatch(KindLateResponseLayer, t, lag, start, values, p.ResponseValueSize())
}

// ParseLateResponseOut decodes an M10L batch at the integrator: the lag and
// the values for input indices [start, start+len) of round t (aliasing b).
func ParseLateResponseOut(p Params, t uint64, b []byte, k int) (lag, start int, values [][]byte, err error) {
	return parseLateBatch(KindLateResponseOut, t, b, p.ResponseValueSize(), k)
}

// LateUserResponseSize is |M11L| = header ‖ lag(4) ‖ index(4) ‖ ⟨r⟩_D.
func (p Params) LateUserResponseSize() int { return headerSize + 8 + p.ResponseValueSize() }

// MarshalLateUserResponse builds M11L, which the integrator sends to the user
// of every input index of round t at every lag, whether or not anything was
// answered.
func MarshalLateUserResponse(p Params, t uint64, lag int, index uint32, value []byte) ([]byte, error) {
	if len(value) != p.ResponseValueSize() {
		return nil, fmt.Errorf("%w: response value of %d bytes", ErrSize, len(value))
	}
	if lag < 1 || lag > MaxAsyncWindow {
		return nil, fmt.Errorf("%w: lag %d", ErrParams, lag)
	}
	b := make([]byte, p.LateUserResponseSize())
	putHeader(b, KindLateUserResponse, t)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(lag))
	binary.BigEndian.PutUint32(b[headerSize+4:], index)
	copy(b[headerSize+8:], value)
	return b, nil
}

// OpenLateResponse decrypts M11L and returns the payload and the lag.
// ErrDecrypt is the normal outcome for every lag at which the device did not
// answer this command.
func (pc *PendingCommand) OpenLateResponse(m11l []byte) ([]byte, int, error) {
	t, err := parseHeader(m11l, KindLateUserResponse, pc.params.LateUserResponseSize())
	if err != nil {
		return nil, 0, err
	}
	if err := expectRound(t, pc.T); err != nil {
		return nil, 0, err
	}
	lag := int(binary.BigEndian.Uint32(m11l[headerSize:]))
	if lag < 1 || lag > MaxAsyncWindow {
		return nil, 0, fmt.Errorf("%w: lag %d", ErrNonCanonical, lag)
	}
	pt, err := openDevice(&pc.aeKey, aadResponse, &pc.Z, m11l[headerSize+8:])
	if err != nil {
		return nil, lag, err
	}
	id, payload, err := parseResponse(pt)
	if err != nil {
		return nil, lag, err
	}
	if id != pc.ID {
		return nil, lag, fmt.Errorf("%w: response names another command", ErrDecrypt)
	}
	return payload, lag, nil
}

// ---- shuffler (M9L → M10L) ----

// LateShuffle is what V* keeps of the round it shuffled, for the window: π
// (as output position → input index, −1 for a fake), the validity of each
// input index and its k_V*^resp. It never contains z, v or the command.
type LateShuffle struct {
	params Params
	w      AsyncWindow
	t      uint64
	rand   io.Reader
	input  []int32
	valid  []bool
	keys   [][KeySize]byte

	mu      sync.Mutex
	lag     int // lag being collected; 0 before the first
	done    int // highest lag released
	resp    [][]byte
	seenPos int
}

// Retain keeps V*'s response state of round r for w rounds (after Finish).
func (r *ShuffleRound) Retain(w AsyncWindow) (*LateShuffle, error) {
	if err := w.Validate(r.s.params); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseShuffled {
		return nil, ErrPhase
	}
	l := &LateShuffle{params: r.s.params, w: w, t: r.info.T, rand: r.rand,
		input: make([]int32, len(r.perm)), valid: slices.Clone(r.valid), keys: make([][KeySize]byte, r.k)}
	for pos, li := range r.perm {
		l.input[pos] = r.listIdx[li]
	}
	for i := range r.k {
		if r.valid[i] {
			l.keys[i] = r.layers[i].RespKey
		}
	}
	return l, nil
}

// T is the retained round.
func (l *LateShuffle) T() uint64 { return l.t }

// AcceptLateResponses records an M9L batch. The lag must lie in the window
// and be above every lag already released: each keystream is used once, so
// the integrator cannot make V* unshuffle two different inputs under one key.
func (l *LateShuffle) AcceptLateResponses(m9l []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.input == nil {
		return fmt.Errorf("%w: round %d dropped", ErrLateWindow, l.t)
	}
	lag, start, recs, err := parseLateBatch(KindLateResponseLayer, l.t, m9l, l.params.ResponseValueSize(), len(l.input))
	if err != nil {
		return err
	}
	if lag > int(l.w) {
		return fmt.Errorf("%w: lag %d, window %d", ErrLateWindow, lag, l.w)
	}
	if lag <= l.done || (l.lag != 0 && lag != l.lag) {
		return fmt.Errorf("%w: lag %d while collecting %d (released up to %d)", ErrPhase, lag, l.lag, l.done)
	}
	if l.lag == 0 {
		l.lag, l.resp, l.seenPos = lag, make([][]byte, len(l.input)), 0
	}
	for i, rec := range recs {
		if l.resp[start+i] != nil {
			return fmt.Errorf("%w: late response position %d twice", ErrIndex, start+i)
		}
		l.resp[start+i] = append([]byte(nil), rec...)
		l.seenPos++
	}
	return nil
}

// LateResponsesOut is the late ShuffleResponses for the lag being collected:
// it removes V*'s keystream of that lag from the real positions, undoes π,
// drops the fakes and returns M10L batches covering input indices [0, k);
// invalid indices get random bytes. All N positions must have arrived.
func (l *LateShuffle) LateResponsesOut(batch int) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lag == 0 || l.seenPos != len(l.input) {
		return nil, ErrRoundOpen
	}
	vs := l.params.ResponseValueSize()
	nonce := lateNonce(&nonceRespShuffler, l.lag)
	out := make([][]byte, len(l.keys))
	for pos, in := range l.input {
		if in < 0 || !l.valid[in] {
			continue
		}
		v := l.resp[pos]
		xorRespLayer(v, &l.keys[in], &nonce)
		out[in] = v
	}
	for i := range out {
		if out[i] == nil {
			out[i] = make([]byte, vs)
			if _, err := io.ReadFull(l.rand, out[i]); err != nil {
				return nil, err
			}
		}
	}
	batch = max(batch, 1)
	var msgs [][]byte
	for s := 0; s < len(out) || s == 0; s += batch {
		e := min(s+batch, len(out))
		m, err := marshalLateBatch(KindLateResponseOut, l.t, l.lag, s, out[s:e], vs)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
		if e == len(out) {
			break
		}
	}
	l.done, l.lag, l.resp = l.lag, 0, nil
	return msgs, nil
}

// Drop zeroes the retained response keys and forgets π and the fake set.
func (l *LateShuffle) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.keys {
		clear(l.keys[i][:])
	}
	l.keys, l.input, l.valid, l.resp = nil, nil, nil, nil
}

// ---- retention ----

// LateResponses is one party's store of retained rounds (the integrator's
// *LateRound, V*'s *LateShuffle): Advance hands out the rounds still inside
// the window and drops — and zeroes, through Drop — every round older than W
// (spec O15; §10: TTL = response deadline + W rounds). Safe for concurrent use.
type LateResponses[S interface{ Drop() }] struct {
	w      AsyncWindow
	mu     sync.Mutex
	rounds map[uint64]S
}

// PendingRound is a retained round inside the window at the current round.
type PendingRound[S any] struct {
	T     uint64
	Lag   int
	State S
}

// NewLateResponses returns an empty store for window w.
func NewLateResponses[S interface{ Drop() }](w AsyncWindow) *LateResponses[S] {
	return &LateResponses[S]{w: w, rounds: map[uint64]S{}}
}

// Keep retains state s of round t.
func (l *LateResponses[S]) Keep(t uint64, s S) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.rounds[t]; dup {
		return fmt.Errorf("%w: round %d retained twice", ErrIndex, t)
	}
	l.rounds[t] = s
	return nil
}

// Advance drops every round that has left the window at round current and
// returns the pending ones (1 ≤ lag ≤ W), oldest first.
func (l *LateResponses[S]) Advance(current uint64) []PendingRound[S] {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []PendingRound[S]
	for t, s := range l.rounds {
		if t >= current {
			continue
		}
		lag, err := l.w.Lag(t, current)
		if err != nil {
			s.Drop()
			delete(l.rounds, t)
			continue
		}
		out = append(out, PendingRound[S]{T: t, Lag: lag, State: s})
	}
	slices.SortFunc(out, func(a, b PendingRound[S]) int { return int(b.Lag - a.Lag) })
	return out
}

// Get returns the retained state of round t.
func (l *LateResponses[S]) Get(t uint64) (S, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.rounds[t]
	return s, ok
}

// Len is the number of rounds retained.
func (l *LateResponses[S]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.rounds)
}
