package mohito

// The in-process round engine: every role of a Mohito deployment wired
// together through the package's stage functions and envelopes, with the
// views of the integrator, the shuffler and each vendor captured for the
// transcript tests. It is test code, not a service.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"
)

type worldConfig struct {
	params       Params
	deviceCounts []int // per vendor
	users        int
	policy       []TargetPolicy
	delta        uint64
	capacity     []int // public K_v
	quantum      int   // public response-table quantum
	seed         uint64
}

type devRef struct{ v, d int }

type world struct {
	cfg       worldConfig
	p         Params
	ikey      *PrivateKey
	integ     *Integrator
	vkeys     []*PrivateKey
	vendors   []*Vendor
	shufflers []*Shuffler
	devices   [][]*Device
	creds     [][]DeviceCredentials
	owned     [][]devRef // user → devices
	t         uint64
	now       time.Time
	rng       *mrand.Rand
}

func newWorld(tb testing.TB, cfg worldConfig) *world {
	tb.Helper()
	p := cfg.params
	w := &world{cfg: cfg, p: p, t: 1000, now: time.Unix(1_750_000_000, 0), rng: mrand.New(mrand.NewPCG(cfg.seed, 7))}
	var err error
	if w.ikey, err = GenerateKey(p.Suite); err != nil {
		tb.Fatal(err)
	}
	if w.integ, err = NewIntegrator(p, w.ikey); err != nil {
		tb.Fatal(err)
	}
	w.owned = make([][]devRef, cfg.users)
	for v, n := range cfg.deviceCounts {
		k, err := GenerateKey(p.Suite)
		if err != nil {
			tb.Fatal(err)
		}
		w.vkeys = append(w.vkeys, k)
		prf := make([][KeySize]byte, n)
		devs := make([]*Device, n)
		creds := make([]DeviceCredentials, n)
		for d := range n {
			s, err := NewDeviceSecret(rand.Reader)
			if err != nil {
				tb.Fatal(err)
			}
			keys := s.Keys()
			prf[d] = keys.PRF // the vendor gets k_prf only, never s_D
			devs[d] = NewDevice(&s, p, time.Minute)
			creds[d] = DeviceCredentials{Vendor: uint32(v), Keys: keys}
			u := w.rng.IntN(cfg.users)
			w.owned[u] = append(w.owned[u], devRef{v, d})
		}
		vend, err := NewVendor(uint32(v), p, prf)
		if err != nil {
			tb.Fatal(err)
		}
		pool := NewFakePool(p, w.ikey.PublicKey())
		for fv := range len(cfg.deviceCounts) {
			if err := pool.Fill(uint32(fv), 4, rand.Reader); err != nil {
				tb.Fatal(err)
			}
		}
		sh, err := NewShuffler(uint32(v), p, k, pool)
		if err != nil {
			tb.Fatal(err)
		}
		w.vendors = append(w.vendors, vend)
		w.shufflers = append(w.shufflers, sh)
		w.devices = append(w.devices, devs)
		w.creds = append(w.creds, creds)
	}
	return w
}

func (w *world) nextRoundInfo() *RoundInfo {
	w.t++
	w.now = w.now.Add(2 * time.Second)
	s := uint32(w.t % uint64(w.p.Vendors))
	return &RoundInfo{T: w.t, Shuffler: s, Params: w.p, IntegratorKey: w.ikey.PublicKey(), ShufflerKey: w.vkeys[s].PublicKey()}
}

func userName(u int) string { return fmt.Sprintf("user-%d", u) }

// intent is one honest command.
type intent struct {
	user int
	dev  devRef
	j    uint32
}

// attack is a malicious submission: build returns the M1 bytes (or nil to
// skip); wantAdmit is the error Admit must return (nil: admitted, and then it
// must fail later without being delivered unless delivered is true).
type attack struct {
	name      string
	group     string // attacks of one group deliver exactly one command
	user      int
	build     func(ri *RoundInfo) []byte
	wantAdmit error
	// afterAdmit, if set, is checked after the round.
	check func(t testing.TB, res *roundResult, index int)
}

type roundPlan struct {
	intents  []intent
	attacks  []attack
	inactive map[devRef]bool
	targets  []uint64 // nil: drawn fresh (G3a)
	// async, if set, runs the asynchronous-response path (App. A) of
	// async_test.go alongside the synchronous one; nil leaves runRound as it
	// was.
	async *asyncRun
}

type integratorView struct {
	perVendor      []int // decrypted entries per vendor
	void           int
	m1Sizes        []int
	m4Sizes        []int
	cmdTableSizes  []int
	respTableSizes []int
	m9Sizes        []int
	m10Sizes       []int
	m11Sizes       []int
	perUser        map[string]int
	respLayer      [][]byte // r′ by shuffled position
	respOK         int      // positions whose r′ was produced (always N under G1)
	respOpened     []bool   // by position: what the integrator observed of its layer
}

type vendorView struct {
	tableSize  int
	pattern    []EphemeralID
	m6Sizes    []int
	m7Sizes    []int
	decoded    [][]byte // per active device: the q slot values it forwarded
	recipients []bool   // ground truth (not part of the view): device got a real command
	m7lSizes   []int    // async: late M7L per active device
	lateVals   [][]byte // async: every late record value received
	lateReal   []bool   // ground truth: the late record carried a real answer
}

type shufflerView struct {
	received [][]byte
}

type roundResult struct {
	info          *RoundInfo
	targets       []uint64
	stats         ShuffleStats
	counts        []int
	iview         integratorView
	vviews        []vendorView
	sview         shufflerView
	delivered     int // honest commands delivered exactly once and answered
	attackIdx     map[string]int
	deliverGroups map[string]bool
	admitErrs     map[string]error
	fakeAt        []bool // ground truth: shuffled position is a fake
	deviceCmds    int    // commands opened at devices in total
	deviceIDs     map[[16]byte]int
	invalid       int
	inputAt       []int32   // ground truth: shuffled position → input index, −1 for a fake
	vendorAt      []uint32  // integrator's view: vendor of each shuffled position
	late          *lateView // async only
}

const outBatch = 64

// runRound runs one whole round and checks delivery and response routing.
func (w *world) runRound(tb testing.TB, plan roundPlan) *roundResult {
	tb.Helper()
	p := w.p
	ri := w.nextRoundInfo()
	res := &roundResult{info: ri, attackIdx: map[string]int{}, admitErrs: map[string]error{}, deliverGroups: map[string]bool{}}
	res.iview.perUser = map[string]int{}
	targets := plan.targets
	if targets == nil {
		var err error
		if targets, err = DrawTargets(w.cfg.policy, w.cfg.delta, rand.Reader); err != nil {
			tb.Fatal(err)
		}
	}
	res.targets = targets
	ir, err := w.integ.NewRound(ri, targets)
	if err != nil {
		tb.Fatal(err)
	}
	sh := w.shufflers[ri.Shuffler]
	sr, err := sh.NewRound(ri, nil)
	if err != nil {
		tb.Fatal(err)
	}
	toShuffler := func(b []byte) { res.sview.received = append(res.sview.received, b) }

	// C1–C2: users submit, the gateway admits and forwards, V* opens as
	// messages stream in.
	type pending struct {
		pc    *PendingCommand
		in    intent
		index int
	}
	var pend []pending
	forward := func(m2 []byte) {
		toShuffler(m2)
		idx, layer, err := sh.OpenForward(ri.T, m2)
		switch {
		case err == nil:
		case errors.Is(err, ErrDecrypt) || errors.Is(err, ErrNonCanonical):
			layer = nil
		default:
			tb.Fatalf("open forward: %v", err)
		}
		if err := sr.Accept(idx, layer); err != nil {
			tb.Fatalf("accept: %v", err)
		}
	}
	m1s := make([][]byte, len(plan.intents))
	pcs := make([]*PendingCommand, len(plan.intents))
	parallel(len(plan.intents), func(i int) {
		in := plan.intents[i]
		payload := []byte(fmt.Sprintf("cmd u%d v%d d%d j%d", in.user, in.dev.v, in.dev.d, in.j))
		var err error
		m1s[i], pcs[i], err = IssueCommand(ri, &w.creds[in.dev.v][in.dev.d], in.j, payload, w.now, rand.Reader)
		if err != nil {
			panic(err)
		}
	})
	// Attacks are interleaved at random positions among honest traffic.
	order := w.rng.Perm(len(plan.intents) + len(plan.attacks))
	for _, o := range order {
		if o < len(plan.intents) {
			in := plan.intents[o]
			res.iview.m1Sizes = append(res.iview.m1Sizes, len(m1s[o]))
			idx, m2, err := ir.Admit(userName(in.user), m1s[o])
			if err != nil {
				tb.Fatalf("honest submission rejected: %v", err)
			}
			res.iview.perUser[userName(in.user)]++
			pend = append(pend, pending{pcs[o], in, int(idx)})
			forward(m2)
			continue
		}
		a := plan.attacks[o-len(plan.intents)]
		m1 := a.build(ri)
		idx, m2, err := ir.Admit(userName(a.user), m1)
		res.admitErrs[a.name] = err
		if !errors.Is(err, a.wantAdmit) || (a.wantAdmit == nil && err != nil) {
			tb.Fatalf("attack %s: admit error %v, want %v", a.name, err, a.wantAdmit)
		}
		if err == nil {
			res.attackIdx[a.name] = int(idx)
			if a.group != "" {
				res.deliverGroups[a.group] = true
			}
			forward(m2)
		}
	}

	// C3 and the G2 check.
	if _, err := sr.Output(0, 0); !errors.Is(err, ErrRoundOpen) {
		tb.Fatalf("shuffler emitted before close: %v", err)
	}
	m3, err := ir.Close()
	if err != nil {
		tb.Fatal(err)
	}
	toShuffler(m3)
	if err := sr.Close(m3); err != nil {
		tb.Fatal(err)
	}
	ch, err := sr.Challenge()
	if err != nil {
		tb.Fatal(err)
	}
	reply, err := ir.Reply(ch)
	if err != nil {
		tb.Fatal(err)
	}
	toShuffler(reply)
	verdict, err := sr.Verdict(reply)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := sr.Output(0, 0); !errors.Is(err, ErrRoundOpen) {
		tb.Fatalf("shuffler emitted before Y: %v", err)
	}
	fin, err := ir.Finish(verdict)
	if err != nil {
		tb.Fatal(err)
	}
	toShuffler(fin)
	summary, err := sr.Finish(fin)
	if err != nil {
		tb.Fatal(err)
	}
	sum, counts, err := ir.AcceptSummary(summary)
	if err != nil {
		tb.Fatal(err)
	}
	res.stats, res.counts = sr.Stats(), counts
	for i := range ir.K() {
		if !ir.Valid(i) {
			res.invalid++
		}
	}

	// C4–C5: output in π order, decrypt (Stage A), group (B), encode (C).
	var cmds []ShuffledCommand
	for s := 0; s < sum.N; s += outBatch {
		m4, err := sr.Output(s, min(outBatch, sum.N-s))
		if err != nil {
			tb.Fatal(err)
		}
		res.iview.m4Sizes = append(res.iview.m4Sizes, len(m4))
		got, void, err := w.integ.OpenShuffled(ri.T, m4, sum.N, nil)
		if err != nil {
			tb.Fatal(err)
		}
		res.iview.void += void
		cmds = append(cmds, got...)
	}
	res.vendorAt = make([]uint32, sum.N)
	for _, c := range cmds {
		res.vendorAt[c.Pos] = c.Vendor
	}
	byVendor, void := GroupByVendor(cmds, p.Vendors)
	res.iview.perVendor = make([]int, p.Vendors)
	slots := make([][]ResponseSlot, p.Vendors)
	m5 := make([][]byte, p.Vendors)
	parallel(p.Vendors, func(v int) {
		res.iview.perVendor[v] = len(byVendor[v])
		capacity := CommandCapacity(len(byVendor[v]), w.cfg.capacity[v])
		table, sl, _, err := EncodeCommandTable(p, byVendor[v], capacity, nil)
		if err != nil {
			panic(err)
		}
		slots[v] = sl
		if m5[v], err = MarshalTable(KindCommandTable, ri.T, uint32(v), capacity, table); err != nil {
			panic(err)
		}
	})
	for v := range m5 {
		res.iview.cmdTableSizes = append(res.iview.cmdTableSizes, len(m5[v]))
	}

	// C6–C7, R1–R2: vendors decode for every active device, devices answer
	// every slot, vendors encode responses.
	res.vviews = make([]vendorView, p.Vendors)
	m8 := make([][]byte, p.Vendors)
	m8l := make([][]byte, p.Vendors)
	var mu sync.Mutex
	deviceCmds := map[[16]byte]int{}
	parallel(p.Vendors, func(v int) {
		vv := &res.vviews[v]
		table, _, err := ParseCommandTable(p, ri.T, uint32(v), w.cfg.capacity[v], m5[v])
		if err != nil {
			panic(err)
		}
		vv.tableSize = len(m5[v])
		var active []int
		for d := range w.devices[v] {
			if !plan.inactive[devRef{v, d}] {
				active = append(active, d)
			}
		}
		vr, err := w.vendors[v].NewRound(ri, active)
		if err != nil {
			panic(err)
		}
		vv.pattern = vr.DecodePattern()
		m6s, err := vr.DecodeCommands(table)
		if err != nil {
			panic(err)
		}
		vs := p.DeviceCiphertextSize()
		for i, d := range active {
			m6 := m6s[i]
			vv.m6Sizes = append(vv.m6Sizes, len(m6))
			vv.decoded = append(vv.decoded, m6[headerSize+4:headerSize+4+p.Q*vs])
			dev := w.devices[v][d]
			t, dslots, err := dev.ReceiveCommands(m6, w.now)
			if err != nil {
				panic(err)
			}
			got := false
			payloads := make([][]byte, p.Q)
			for j, s := range dslots {
				if s.Command != nil && !s.Repeat {
					got = true
					mu.Lock()
					deviceCmds[s.Command.ID]++
					mu.Unlock()
					payloads[j] = []byte("ack " + hex.EncodeToString(s.Command.ID[:4]) + " " + string(s.Command.Payload))
				}
			}
			vv.recipients = append(vv.recipients, got)
			if plan.async != nil {
				plan.async.deferSlots(t, devRef{v, d}, dslots, payloads)
			}
			var m7 []byte
			if p.ResponseMode == ResponsePaperLiteral {
				m7, err = dev.RespondPaperLiteral(ri, dslots, payloads, rand.Reader)
			} else {
				m7, err = dev.Respond(t, dslots, payloads, rand.Reader)
			}
			if err != nil {
				panic(err)
			}
			vv.m7Sizes = append(vv.m7Sizes, len(m7))
			if err := vr.AcceptResponse(i, m7); err != nil {
				panic(err)
			}
			if plan.async != nil {
				plan.async.sendLate(t, devRef{v, d}, dev, vr, i, vv)
			}
		}
		if plan.async != nil {
			lt, lc, err := vr.EncodeLateResponses(plan.async.w, w.cfg.quantum, nil)
			if err != nil {
				panic(err)
			}
			if m8l[v], err = MarshalTable(KindLateResponseTable, ri.T, uint32(v), lc, lt); err != nil {
				panic(err)
			}
		}
		rt, capacity, err := vr.EncodeResponses(w.cfg.quantum, nil)
		if err != nil {
			panic(err)
		}
		if m8[v], err = MarshalTable(KindResponseTable, ri.T, uint32(v), capacity, rt); err != nil {
			panic(err)
		}
	})
	res.deviceIDs = deviceCmds
	for _, n := range deviceCmds {
		res.deviceCmds += n
		if n != 1 {
			tb.Fatalf("a command reached its device %d times", n)
		}
	}

	// R3: the integrator decodes every position of every vendor (G1: no
	// failure possible), then M9 to V*.
	respLayer := make([][]byte, sum.N)
	res.iview.respOpened = make([]bool, sum.N)
	for v := range p.Vendors {
		res.iview.respTableSizes = append(res.iview.respTableSizes, len(m8[v]))
		rt, _, err := ParseResponseTable(p, ri.T, uint32(v), w.cfg.quantum, 1<<22, m8[v])
		if err != nil {
			tb.Fatal(err)
		}
		out := make([][]byte, len(slots[v]))
		opened := make([]bool, len(out))
		if p.ResponseMode == ResponsePaperLiteral {
			if opened, err = w.integ.DecodeResponseLayerPaperLiteral(ri.T, rt, slots[v], out, nil); err != nil {
				tb.Fatal(err)
			}
		} else {
			// G1: the keystream layer cannot fail, so every position "opens".
			if err := DecodeResponseLayer(p, rt, slots[v], out); err != nil {
				tb.Fatal(err)
			}
			for i := range opened {
				opened[i] = true
			}
		}
		for i, s := range slots[v] {
			respLayer[s.Pos] = out[i]
			res.iview.respOpened[s.Pos] = opened[i]
		}
	}
	for i := range void {
		if respLayer[void[i].Pos], err = VoidResponseLayer(p, nil); err != nil {
			tb.Fatal(err)
		}
	}
	res.iview.respLayer = respLayer
	for s := 0; s < sum.N; s += outBatch {
		e := min(s+outBatch, sum.N)
		for _, r := range respLayer[s:e] {
			if len(r) == p.ResponseLayerSize() {
				res.iview.respOK++
			}
		}
		m9, err := MarshalResponseLayer(p, ri.T, s, respLayer[s:e])
		if err != nil {
			tb.Fatal(err)
		}
		res.iview.m9Sizes = append(res.iview.m9Sizes, len(m9))
		toShuffler(m9)
		if err := sr.AcceptResponses(m9); err != nil {
			tb.Fatal(err)
		}
	}
	res.fakeAt = make([]bool, sum.N)
	res.inputAt = make([]int32, sum.N)
	for pos, li := range sr.perm {
		res.fakeAt[pos] = sr.listIdx[li] < 0
		res.inputAt[pos] = sr.listIdx[li]
	}

	// R4–R5: V* unshuffles; I routes each r_i to the user of index i.
	m10s, err := sr.ResponsesOut(outBatch)
	if err != nil {
		tb.Fatal(err)
	}
	byIndex := make([][]byte, ir.K())
	for _, m10 := range m10s {
		res.iview.m10Sizes = append(res.iview.m10Sizes, len(m10))
		start, vals, err := ParseResponseOut(p, ri.T, m10, ir.K())
		if err != nil {
			tb.Fatal(err)
		}
		for i, v := range vals {
			byIndex[start+i] = v
		}
	}
	for _, pd := range pend {
		if !ir.Valid(pd.index) {
			tb.Fatalf("honest message %d failed the share check", pd.index)
		}
		if ir.User(pd.index) != userName(pd.in.user) {
			tb.Fatal("index → user mapping broken")
		}
		m11, err := MarshalUserResponse(p, ri.T, uint32(pd.index), byIndex[pd.index])
		if err != nil {
			tb.Fatal(err)
		}
		res.iview.m11Sizes = append(res.iview.m11Sizes, len(m11))
		if plan.async != nil && plan.async.awaitLate(tb, ri.T, pd.index, pd.pc, pd.in, m11) {
			continue // answered late: the synchronous M11 carried random bytes
		}
		payload, err := pd.pc.OpenResponse(m11)
		if err != nil {
			tb.Fatalf("round %d: honest response for user %d did not open: %v", ri.T, pd.in.user, err)
		}
		if deviceCmds[pd.pc.ID] != 1 {
			tb.Fatalf("honest command not delivered exactly once (%d)", deviceCmds[pd.pc.ID])
		}
		want := fmt.Sprintf("ack %s cmd u%d v%d d%d j%d", hex.EncodeToString(pd.pc.ID[:4]), pd.in.user, pd.in.dev.v, pd.in.dev.d, pd.in.j)
		if !bytes.Equal(payload, []byte(want)) {
			tb.Fatalf("response routed to the wrong user: %q want %q", payload, want)
		}
		res.delivered++
	}
	if plan.async != nil {
		plan.async.latePhase(tb, w, ri, ir, sr, slots, void, m8l, res)
	}
	for _, a := range plan.attacks {
		if a.check != nil {
			idx, ok := res.attackIdx[a.name]
			if !ok {
				idx = -1
			}
			a.check(tb, res, idx)
		}
	}
	// Burst invariant (spec §3.8, §9.1 #5) on what the integrator saw.
	for v := range p.Vendors {
		if res.iview.perVendor[v] != counts[v] && res.iview.void == 0 && len(plan.attacks) == 0 {
			tb.Fatalf("vendor %d: %d entries, want C_v + S = %d", v, res.iview.perVendor[v], counts[v])
		}
	}
	return res
}

// parallel runs f(0..n-1) on two workers (the machine has two cores), turning
// panics into test failures through the caller's panic.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	var next int
	var mu sync.Mutex
	var perr any
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					perr = r
					mu.Unlock()
				}
			}()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
	if perr != nil {
		panic(perr)
	}
}

// honestIntents picks up to n commands: random users send to random owned
// devices, at most q per user, distinct (device, j) per round.
func (w *world) honestIntents(n int, exclude map[int]bool) []intent {
	var out []intent
	perUser := map[int]int{}
	used := map[devRef]uint32{}
	for tries := 0; len(out) < n && tries < 50*n; tries++ {
		u := w.rng.IntN(w.cfg.users)
		if exclude[u] || len(w.owned[u]) == 0 || perUser[u] >= w.p.Q {
			continue
		}
		d := w.owned[u][w.rng.IntN(len(w.owned[u]))]
		if used[d] >= uint32(w.p.Q) {
			continue
		}
		used[d]++
		perUser[u]++
		out = append(out, intent{user: u, dev: d, j: used[d]})
	}
	return out
}
