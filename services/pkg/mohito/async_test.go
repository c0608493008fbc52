package mohito

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// The asynchronous-response path (spec §3.9, App. A, O15) on top of the
// in-process round engine: asyncRun is carried by roundPlan.async across
// rounds and holds what devices, the integrator and the shufflers keep
// between rounds, plus ground truth for the assertions.

type lateItem struct {
	due uint64
	ans LateAnswer
}

// awaited is a user's pending command as the test follows it.
type awaited struct {
	pc   *PendingCommand
	want []byte
	lag  int // 0: answered synchronously
}

// lateView is the integrator's late-path transcript of one round.
type lateView struct {
	TableSizes  []int // M8L per vendor
	Lags        []int // pending rounds processed, by lag
	M9L, M10L   []int
	M11L        []int
	M11LPerUser map[string]int
	values      [][]byte // late r′ by (pending round, position)
	fake        []bool   // ground truth per value: a fake position
	answered    []bool   // ground truth per value: the device answered at this lag
}

type asyncRun struct {
	w      AsyncWindow
	lagFor func(t uint64, payload string) int // 0: answer now

	mu       sync.Mutex
	queue    []map[int][]lateItem // per vendor, per device
	deferred map[[16]byte]int
	dropped  int // answers RespondLate refused (later than W)

	integ  *LateResponses[*LateRound]
	shuf   []*LateResponses[*LateShuffle] // per vendor as V*
	await  map[uint64]map[int]*awaited
	inputs map[uint64][]int32 // round → position → input index
	opened map[[16]byte][]int // command id → lags at which it opened (0: sync)
	m11l   map[uint64]int     // round → M11L sent for it
	kOf    map[uint64]int
	maxLen int // most rounds any store held
}

func newAsyncRun(w AsyncWindow, vendors int, lagFor func(uint64, string) int) *asyncRun {
	a := &asyncRun{w: w, lagFor: lagFor, queue: make([]map[int][]lateItem, vendors),
		deferred: map[[16]byte]int{}, integ: NewLateResponses[*LateRound](w),
		await: map[uint64]map[int]*awaited{}, inputs: map[uint64][]int32{}, opened: map[[16]byte][]int{},
		m11l: map[uint64]int{}, kOf: map[uint64]int{}}
	for v := range vendors {
		a.queue[v] = map[int][]lateItem{}
		a.shuf = append(a.shuf, NewLateResponses[*LateShuffle](w))
	}
	return a
}

// deferSlots is the device's choice: slots whose command lagFor delays are
// taken out of the synchronous answer and queued for round t + lag.
func (a *asyncRun) deferSlots(t uint64, d devRef, slots []DeviceSlot, payloads [][]byte) {
	for j := range slots {
		c := slots[j].Command
		if c == nil {
			continue
		}
		lag := a.lagFor(t, string(c.Payload))
		if lag == 0 {
			continue
		}
		s := slots[j].Defer()
		a.queue[d.v][d.d] = append(a.queue[d.v][d.d], lateItem{due: t + uint64(lag), ans: LateAnswer{T: t, Slot: s, Payload: payloads[j]}})
		a.mu.Lock()
		a.deferred[c.ID] = lag
		a.mu.Unlock()
	}
}

// sendLate is the device's M7L for round t (every active device, every
// round) and the vendor accepting it.
func (a *asyncRun) sendLate(t uint64, d devRef, dev *Device, vr *VendorRound, i int, vv *vendorView) {
	var due []LateAnswer
	keep := a.queue[d.v][d.d][:0]
	for _, it := range a.queue[d.v][d.d] {
		switch {
		case it.due == t:
			due = append(due, it.ans)
		case it.due > t:
			keep = append(keep, it)
		}
	}
	a.queue[d.v][d.d] = keep
	m7l, dropped, err := dev.RespondLate(t, a.w, due, rand.Reader)
	if err != nil {
		panic(err)
	}
	a.mu.Lock()
	a.dropped += dropped
	a.mu.Unlock()
	vv.m7lSizes = append(vv.m7lSizes, len(m7l))
	p := dev.params
	rs := EphemeralIDSize + p.ResponseValueSize()
	real := map[int]bool{}
	for _, ans := range due {
		if lag, err := a.w.Lag(ans.T, t); err == nil {
			real[(lag-1)*p.Q+int(ans.Slot.J)-1] = true
		}
	}
	for r := range int(a.w) * p.Q {
		vv.lateVals = append(vv.lateVals, m7l[headerSize+r*rs+EphemeralIDSize:headerSize+(r+1)*rs])
		vv.lateReal = append(vv.lateReal, real[r])
	}
	if err := vr.AcceptLateResponse(i, a.w, m7l); err != nil {
		panic(err)
	}
}

// awaitLate registers an honest command with the test's user. For a deferred
// command it checks that the synchronous M11 does not open and reports true.
func (a *asyncRun) awaitLate(tb testing.TB, t uint64, index int, pc *PendingCommand, in intent, m11 []byte) bool {
	tb.Helper()
	want := fmt.Sprintf("ack %s cmd u%d v%d d%d j%d", hex.EncodeToString(pc.ID[:4]), in.user, in.dev.v, in.dev.d, in.j)
	lag := a.deferred[pc.ID]
	if a.await[t] == nil {
		a.await[t] = map[int]*awaited{}
	}
	a.await[t][index] = &awaited{pc: pc, want: []byte(want), lag: lag}
	if lag == 0 {
		a.opened[pc.ID] = append(a.opened[pc.ID], 0)
		return false
	}
	if _, err := pc.OpenResponse(m11); !errors.Is(err, ErrDecrypt) {
		tb.Fatalf("deferred command: synchronous response opened (%v)", err)
	}
	return true
}

// latePhase is the integrator's and the shufflers' work for every pending
// round at round ri, then retention of round ri itself.
func (a *asyncRun) latePhase(tb testing.TB, w *world, ri *RoundInfo, ir *IntegratorRound, sr *ShuffleRound,
	slots [][]ResponseSlot, void []ShuffledCommand, m8l [][]byte, res *roundResult) {
	tb.Helper()
	p := w.p
	lv := &lateView{M11LPerUser: map[string]int{}}
	tables := make([]*okvs.Table, p.Vendors)
	for v := range p.Vendors {
		lv.TableSizes = append(lv.TableSizes, len(m8l[v]))
		var err error
		if tables[v], _, err = ParseLateResponseTable(p, ri.T, uint32(v), w.cfg.quantum, 1<<22, m8l[v]); err != nil {
			tb.Fatal(err)
		}
	}
	shufPending := map[uint64]bool{}
	for _, st := range a.shuf {
		for _, pr := range st.Advance(ri.T) {
			shufPending[pr.T] = true
		}
	}
	pending := a.integ.Advance(ri.T)
	if len(pending) != len(shufPending) {
		tb.Fatalf("integrator holds %d pending rounds, shufflers %d", len(pending), len(shufPending))
	}
	for t := range a.await {
		if ri.T-t > uint64(a.w) {
			delete(a.await, t) // the user gives up: nothing can arrive any more
		}
	}
	for _, pr := range pending {
		lr := pr.State
		lv.Lags = append(lv.Lags, pr.Lag)
		rp, err := lr.DecodeLate(ri.T, tables, nil)
		if err != nil {
			tb.Fatal(err)
		}
		ls, ok := a.shuf[lr.Shuffler()].Get(pr.T)
		if !ok {
			tb.Fatalf("V* %d lost round %d", lr.Shuffler(), pr.T)
		}
		for pos, v := range rp {
			in := a.inputs[pr.T][pos]
			lv.values = append(lv.values, v)
			lv.fake = append(lv.fake, in < 0)
			aw := a.await[pr.T][int(in)]
			lv.answered = append(lv.answered, in >= 0 && aw != nil && aw.lag == pr.Lag)
		}
		for s := 0; s < lr.N(); s += outBatch {
			e := min(s+outBatch, lr.N())
			m9l, err := MarshalLateResponseLayer(p, pr.T, pr.Lag, s, rp[s:e])
			if err != nil {
				tb.Fatal(err)
			}
			lv.M9L = append(lv.M9L, len(m9l))
			if err := ls.AcceptLateResponses(m9l); err != nil {
				tb.Fatal(err)
			}
		}
		m10ls, err := ls.LateResponsesOut(outBatch)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m10l := range m10ls {
			lv.M10L = append(lv.M10L, len(m10l))
			lag, start, vals, err := ParseLateResponseOut(p, pr.T, m10l, lr.K())
			if err != nil || lag != pr.Lag {
				tb.Fatalf("M10L: lag %d want %d, %v", lag, pr.Lag, err)
			}
			for i, val := range vals {
				idx := start + i
				// I sends M11L to every user of the round, whatever happened.
				m11l, err := MarshalLateUserResponse(p, pr.T, lag, uint32(idx), val)
				if err != nil {
					tb.Fatal(err)
				}
				lv.M11L = append(lv.M11L, len(m11l))
				lv.M11LPerUser[lr.User(idx)]++
				a.m11l[pr.T]++
				aw := a.await[pr.T][idx]
				if aw == nil {
					continue // an attacker's index: nobody to check
				}
				payload, gotLag, err := aw.pc.OpenLateResponse(m11l)
				switch {
				case err == nil:
					if gotLag != aw.lag || !bytes.Equal(payload, aw.want) {
						tb.Fatalf("late response at lag %d (want %d): %q want %q", gotLag, aw.lag, payload, aw.want)
					}
					a.opened[aw.pc.ID] = append(a.opened[aw.pc.ID], gotLag)
				case !errors.Is(err, ErrDecrypt):
					tb.Fatalf("late response: %v", err)
				}
			}
		}
	}
	// Retain round ri: every shuffled position's slot, exactly once.
	var all []ResponseSlot
	for _, s := range slots {
		all = append(all, s...)
	}
	for i := range void {
		all = append(all, VoidSlot(&void[i]))
	}
	lr, err := ir.Retain(a.w, all)
	if err != nil {
		tb.Fatal(err)
	}
	ls, err := sr.Retain(a.w)
	if err != nil {
		tb.Fatal(err)
	}
	if err := a.integ.Keep(ri.T, lr); err != nil {
		tb.Fatal(err)
	}
	if err := a.shuf[ri.Shuffler].Keep(ri.T, ls); err != nil {
		tb.Fatal(err)
	}
	a.inputs[ri.T] = res.inputAt
	a.kOf[ri.T] = ir.K()
	a.maxLen = max(a.maxLen, a.integ.Len())
	res.late = lv
}

// lagByHash spreads commands over lags 0..maxLag with a keyed hash of the
// round and payload (deterministic, independent of the device).
func lagByHash(salt string, maxLag int) func(uint64, string) int {
	return func(t uint64, payload string) int {
		h := uint32(2166136261)
		for _, c := range []byte(fmt.Sprintf("%s|%d|%s", salt, t, payload)) {
			h = (h ^ uint32(c)) * 16777619
		}
		return int(h % uint32(maxLag+1))
	}
}

// TestAsyncResponsesEngine runs whole rounds in which devices answer 0..W+2
// rounds late (W = 3): every response within the window reaches its user
// exactly once — synchronously or at exactly the lag the device chose — and
// never twice; responses later than W are dropped at the device and never
// open; each round's state is retained for W rounds and then dropped; every
// user of a round gets exactly W late messages per message it sent.
func TestAsyncResponsesEngine(t *testing.T) {
	const W = 3
	cfg := privacyConfig()
	cfg.params.Q = 2
	cfg.seed = 77
	w := newWorld(t, cfg)
	a := newAsyncRun(W, w.p.Vendors, lagByHash("engine", W+2))
	var rounds []*roundResult
	traffic, flush := 6, W+2
	issued := map[[16]byte]uint64{}
	for r := range traffic + flush {
		plan := roundPlan{async: a}
		if r < traffic {
			plan.intents = w.honestIntents(40, nil)
		}
		res := w.runRound(t, plan)
		rounds = append(rounds, res)
		for _, byIdx := range a.await {
			for _, aw := range byIdx {
				if _, ok := issued[aw.pc.ID]; !ok {
					issued[aw.pc.ID] = aw.pc.T
				}
			}
		}
		if got := len(res.late.Lags); got != min(r, W) {
			t.Fatalf("round %d: %d pending rounds processed, want %d", r, got, min(r, W))
		}
	}
	if a.maxLen > W+1 {
		t.Fatalf("integrator retained %d rounds, window %d", a.maxLen, W)
	}
	counts := map[string]int{}
	wantDropped := 0
	for id, round := range issued {
		lag := a.deferred[id]
		got := a.opened[id]
		switch {
		case lag <= W && (len(got) != 1 || got[0] != lag):
			t.Fatalf("command of round %d with lag %d opened at lags %v, want exactly once at %d", round, lag, got, lag)
		case lag > W && len(got) != 0:
			t.Fatalf("command later than the window opened at lags %v", got)
		}
		if lag > W {
			wantDropped++
		}
		counts[map[bool]string{true: "late", false: "sync"}[lag > 0 && lag <= W]]++
	}
	if a.dropped != wantDropped {
		t.Fatalf("devices dropped %d answers, want %d", a.dropped, wantDropped)
	}
	if counts["late"] < 30 || counts["sync"] < 30 || wantDropped < 10 {
		t.Fatalf("too few cases exercised: %v, %d dropped", counts, wantDropped)
	}
	// Every user of a round got W late messages per message, whatever
	// happened; the rounds of the last W rounds are still in the window.
	for _, res := range rounds[:len(rounds)-W] {
		if got, want := a.m11l[res.info.T], W*a.kOf[res.info.T]; got != want {
			t.Fatalf("round %d: %d M11L, want W·k = %d", res.info.T, got, want)
		}
	}
	t.Logf("W=%d: %d commands answered synchronously, %d late, %d later than W dropped", W, counts["sync"], counts["late"], wantDropped)
}

// TestAsyncStateDropped checks the window edges on retained state: V*
// releases each lag once and only inside the window, a dropped round answers
// ErrLateWindow at both parties, and the store drops rounds after W.
func TestAsyncStateDropped(t *testing.T) {
	const W = 2
	w := newWorld(t, privacyConfig())
	a := newAsyncRun(W, w.p.Vendors, func(uint64, string) int { return 0 })
	first := w.runRound(t, roundPlan{async: a, intents: w.honestIntents(10, nil)})
	lr, _ := a.integ.Get(first.info.T)
	ls, _ := a.shuf[first.info.Shuffler].Get(first.info.T)
	w.runRound(t, roundPlan{async: a})
	// Lag 1 has been released: V* refuses it again, and refuses lags > W.
	vals := make([][]byte, lr.N())
	for i := range vals {
		vals[i] = make([]byte, w.p.ResponseValueSize())
	}
	again, err := MarshalLateResponseLayer(w.p, first.info.T, 1, 0, vals)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.AcceptLateResponses(again); !errors.Is(err, ErrPhase) {
		t.Fatalf("lag 1 twice: %v", err)
	}
	beyond, _ := MarshalLateResponseLayer(w.p, first.info.T, W+1, 0, vals)
	if err := ls.AcceptLateResponses(beyond); !errors.Is(err, ErrLateWindow) {
		t.Fatalf("lag W+1: %v", err)
	}
	for range W {
		w.runRound(t, roundPlan{async: a})
	}
	if _, ok := a.integ.Get(first.info.T); ok {
		t.Fatal("integrator kept a round beyond the window")
	}
	if _, ok := a.shuf[first.info.Shuffler].Get(first.info.T); ok {
		t.Fatal("shuffler kept a round beyond the window")
	}
	// The store holds the current round and the W before it.
	if a.integ.Len() > W+1 || lr.N() != 0 {
		t.Fatalf("store holds %d rounds; dropped round still has %d slots", a.integ.Len(), lr.N())
	}
	if _, err := lr.Lag(w.t); !errors.Is(err, ErrLateWindow) {
		t.Fatalf("lag of a dropped round: %v", err)
	}
	late, _ := MarshalLateResponseLayer(w.p, first.info.T, W, 0, vals[:0])
	if err := ls.AcceptLateResponses(late); !errors.Is(err, ErrLateWindow) {
		t.Fatalf("dropped V* state accepted a late batch: %v", err)
	}
	if _, _, err := (&Device{params: w.p}).RespondLate(5, 0, nil, rand.Reader); !errors.Is(err, ErrParams) {
		t.Fatal("W = 0 must disable the late path")
	}
}

// lateProjection is everything of the late-path transcripts (integrator and
// vendors) that must not depend on which devices answer late.
type lateProjection struct {
	Sync   integratorProjection
	Late   lateView
	VendM7 [][]int
	VendTb []int
}

func projectLate(r *roundResult) lateProjection {
	lp := lateProjection{Sync: projectIntegrator(r), Late: *r.late}
	lp.Late.values, lp.Late.fake, lp.Late.answered = nil, nil, nil
	for _, vv := range r.vviews {
		lp.VendM7 = append(lp.VendM7, vv.m7lSizes)
	}
	lp.VendTb = r.late.TableSizes
	return lp
}

// TestAsyncTranscriptIndependentOfLateDevices is §9.2 #8/#9/#13 for late
// responses: the same users and destinations run W+2 rounds twice — once with
// most devices answering 1..W rounds late, once with every device answering
// at once — and the integrator's synchronous and late transcripts (late table
// sizes, pending rounds, M9L/M10L sizes, M11L count and size per user) and
// the vendors' M7L sizes are identical. Late r′ values at fake positions, at
// positions answered at that lag and at the others are alike, and so are the
// late records vendors receive from answering and non-answering devices.
func TestAsyncTranscriptIndependentOfLateDevices(t *testing.T) {
	const W = 2
	w := newWorld(t, privacyConfig())
	targets := []uint64{14, 20, 40, 60, 80}
	plans := make([][]intent, W+2)
	for r := range plans {
		plans[r] = w.honestIntents(60, nil)
	}
	run := func(lagFor func(uint64, string) int) ([]lateProjection, []*roundResult) {
		a := newAsyncRun(W, w.p.Vendors, lagFor)
		var lps []lateProjection
		var rs []*roundResult
		for r := range plans {
			res := w.runRound(t, roundPlan{async: a, intents: plans[r], targets: targets})
			lps, rs = append(lps, projectLate(res)), append(rs, res)
		}
		return lps, rs
	}
	lateSkew := lagByHash("skew", W)
	lateA, ra := run(func(t uint64, p string) int { return max(lateSkew(t, p), 1) })
	lateB, rb := run(func(uint64, string) int { return 0 })
	for r := range lateA {
		if !reflect.DeepEqual(lateA[r], lateB[r]) {
			t.Fatalf("round %d: late transcript depends on which devices answered late:\n%+v\n%+v", r, lateA[r], lateB[r])
		}
	}
	var fake, answered, other, recReal, recDummy [][]byte
	for _, rs := range [][]*roundResult{ra, rb} {
		for _, res := range rs {
			l := res.late
			for i, v := range l.values {
				switch {
				case l.fake[i]:
					fake = append(fake, v)
				case l.answered[i]:
					answered = append(answered, v)
				default:
					other = append(other, v)
				}
			}
			for _, vv := range res.vviews {
				for i, v := range vv.lateVals {
					if vv.lateReal[i] {
						recReal = append(recReal, v)
					} else {
						recDummy = append(recDummy, v)
					}
				}
			}
		}
	}
	if len(answered) < 50 || len(recReal) < 50 {
		t.Fatalf("only %d answered positions, %d real late records", len(answered), len(recReal))
	}
	checkIndistinguishable(t, "late r′ fake vs answered", fake, answered)
	checkIndistinguishable(t, "late r′ answered vs unanswered", answered, other)
	checkIndistinguishable(t, "late records real vs dummy", recReal, recDummy)
}

// TestLateKeystreamsDistinct: the keystream of every lag differs from the
// synchronous one and from every other lag, so the one-time response keys
// are never used twice under the same nonce.
func TestLateKeystreamsDistinct(t *testing.T) {
	for _, base := range []*[24]byte{&nonceRespIntegrator, &nonceRespShuffler} {
		seen := map[[24]byte]bool{*base: true, nonceRespIntegrator: true, nonceRespShuffler: true}
		for lag := 1; lag <= MaxAsyncWindow; lag++ {
			n := lateNonce(base, lag)
			if seen[n] {
				t.Fatalf("lag %d reuses a nonce", lag)
			}
			seen[n] = true
		}
	}
}

// FuzzLateEnvelopes covers every decoder of the late path (M7L, M8L, M9L,
// M10L, M11L): errors wrap a sentinel and nothing panics.
func FuzzLateEnvelopes(f *testing.F) {
	fx := getFixture(f)
	const W = 2
	dev := NewDevice(new(DeviceSecret), fx.p, 0)
	m7l, _, err := dev.RespondLate(5, W, nil, rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	val := make([]byte, fx.p.ResponseValueSize())
	m9l, _ := MarshalLateResponseLayer(fx.p, 5, 1, 0, [][]byte{val, val})
	m11l, _ := MarshalLateUserResponse(fx.p, 5, 1, 0, val)
	seeds(f, m7l, m9l, m11l, fx.respTable)
	v, _ := NewVendor(0, fx.p, [][KeySize]byte{dev.keys.PRF})
	f.Fuzz(func(t *testing.T, b []byte) {
		vr, _ := v.NewRound(fx.ri, []int{0})
		requireSentinel(t, vr.AcceptLateResponse(0, W, b))
		_, _, err := ParseLateResponseTable(fx.p, 5, 0, 4, 1<<12, b)
		requireSentinel(t, err)
		_, _, _, err = ParseLateResponseOut(fx.p, 5, b, 2)
		requireSentinel(t, err)
		_, _, err = fx.pc[0].OpenLateResponse(b)
		requireSentinel(t, err)
		ls := &LateShuffle{params: fx.p, w: W, t: 5, rand: rand.Reader, input: []int32{0, -1}, valid: []bool{true}, keys: make([][KeySize]byte, 1)}
		if err := ls.AcceptLateResponses(b); err != nil && !errors.Is(err, ErrLateWindow) {
			requireSentinel(t, err)
		}
	})
}
