package mohito

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// engineConfig is 5 vendors with skewed device counts (10 : 100 : 1000 : 3000
// : 6000), ≥ 1000 users and ≥ 10 000 devices; testing.Short shrinks it.
func engineConfig(q int) worldConfig {
	p := Params{Vendors: 5, Q: q, CommandSize: 160, ResponseSize: 64, Suite: SuiteX25519}
	cfg := worldConfig{
		params:       p,
		deviceCounts: []int{10, 100, 1000, 3000, 6000},
		users:        1200,
		delta:        4,
		// Vendor 0's C_0 ∈ {5, 6} is below the ~10 users who own its devices,
		// so every burst round (burstIntents) bursts whatever C_0 is drawn.
		policy:   []TargetPolicy{{1, 1}, {6, 4}, {40, 8}, {110, 10}, {200, 10}},
		capacity: []int{24, 32, 64, 160, 256},
		quantum:  256,
		seed:     uint64(q),
	}
	if testing.Short() {
		cfg.deviceCounts = []int{10, 40, 200, 400, 600}
		cfg.users = 300
		cfg.policy = []TargetPolicy{{1, 1}, {4, 2}, {10, 4}, {20, 4}, {30, 4}}
		cfg.capacity = []int{16, 16, 32, 48, 64}
		cfg.quantum = 64
	}
	return cfg
}

// TestRoundEngine runs ≥ 20 whole rounds for q ∈ {1, 2}, including a burst
// round and rounds with malicious users, and checks that every honest command
// reaches its device exactly once and every response its user (runRound), no
// fake ever opens at a device, and the burst invariant holds.
func TestRoundEngine(t *testing.T) {
	rounds, perRound := 20, 300
	if testing.Short() {
		rounds, perRound = 4, 60
	}
	for _, q := range []int{1, 2} {
		t.Run(map[int]string{1: "q=1", 2: "q=2"}[q], func(t *testing.T) {
			w := newWorld(t, engineConfig(q))
			totalHonest, totalDelivered, bursts := 0, 0, 0
			for r := range rounds {
				plan := roundPlan{}
				attackers := map[int]bool{}
				switch {
				case r%5 == 2:
					plan.attacks = w.attacks(attackers)
				case r%7 == 3:
					plan.intents = w.burstIntents(0)
					for _, in := range plan.intents {
						attackers[in.user] = true
					}
				}
				if r == 1 {
					// Some devices are offline this round (spec O11).
					plan.inactive = map[devRef]bool{{4, 0}: true, {3, 1}: true, {2, 2}: true}
					for u := range w.owned {
						for _, d := range w.owned[u] {
							if plan.inactive[d] {
								attackers[u] = true
							}
						}
					}
				}
				plan.intents = append(plan.intents, w.honestIntents(perRound, attackers)...)
				res := w.runRound(t, plan)
				totalHonest += len(plan.intents)
				totalDelivered += res.delivered
				// Every command opened at a device was a real, valid one: a
				// fake never decrypts. Real valid commands = honest + the
				// attacks designed to be delivered.
				wantAtDevices := res.delivered + res.attackDelivered()
				if res.deviceCmds != wantAtDevices {
					t.Fatalf("round %d: %d commands opened at devices, want %d", r, res.deviceCmds, wantAtDevices)
				}
				if res.stats.S > 0 {
					bursts++
					checkBurstInvariant(t, res)
				}
				if res.stats.N != sumTargets(res.targets)+w.p.Vendors*res.stats.S {
					t.Fatalf("N = %d, want Σ C + |V|·S", res.stats.N)
				}
			}
			if totalDelivered != totalHonest {
				t.Fatalf("delivered %d of %d", totalDelivered, totalHonest)
			}
			if bursts == 0 {
				t.Fatal("no burst round exercised")
			}
			t.Logf("q=%d: %d rounds, %d honest commands delivered, %d burst rounds, pool misses %d",
				q, rounds, totalDelivered, bursts, w.shufflers[0].pool.Misses())
		})
	}
}

func sumTargets(c []uint64) int {
	s := 0
	for _, x := range c {
		s += int(x)
	}
	return s
}

func checkBurstInvariant(t *testing.T, res *roundResult) {
	t.Helper()
	if res.stats.BurstVendors == 0 {
		t.Fatal("S > 0 without a bursting vendor")
	}
	for v, n := range res.iview.perVendor {
		want := int(res.targets[v]) + res.stats.S
		if res.iview.void == 0 && n != want && len(res.attackIdx) == 0 {
			t.Fatalf("burst round: vendor %d has %d entries, want C_v + S = %d", v, n, want)
		}
	}
}

// burstIntents sends as many commands as possible to vendor v's devices
// (more than C_v), forcing B_v < 0.
func (w *world) burstIntents(v int) []intent {
	var out []intent
	perUser := map[int]int{}
	for u, devs := range w.owned {
		for _, d := range devs {
			if d.v != v {
				continue
			}
			for j := 1; j <= w.p.Q && perUser[u] < w.p.Q; j++ {
				perUser[u]++
				out = append(out, intent{user: u, dev: d, j: uint32(j)})
			}
		}
	}
	return out
}

// attackDelivered is how many admitted attack commands are valid commands
// that must reach a device (duplicates: exactly one copy).
func (res *roundResult) attackDelivered() int {
	return len(res.deliverGroups)
}

// attacks builds the malicious users' submissions for a round. Each attacker
// is a distinct user, excluded from honest traffic that round.
func (w *world) attacks(attackers map[int]bool) []attack {
	pick := func() (int, devRef) {
		for {
			u := w.rng.IntN(w.cfg.users)
			if !attackers[u] && len(w.owned[u]) > 0 {
				attackers[u] = true
				return u, w.owned[u][0]
			}
		}
	}
	var list []attack
	notDelivered := func(id *[16]byte) func(testing.TB, *roundResult, int) {
		return func(tb testing.TB, res *roundResult, idx int) {
			if res.deviceIDs[*id] != 0 {
				tb.Fatalf("malicious command reached a device")
			}
		}
	}
	invalid := func(inner func(testing.TB, *roundResult, int)) func(testing.TB, *roundResult, int) {
		return func(tb testing.TB, res *roundResult, idx int) {
			if res.invalid == 0 {
				tb.Fatal("no message rejected by the share check")
			}
			inner(tb, res, idx)
		}
	}
	badShare := func(name string, mutate func(x []Elem, v int), badMask bool) {
		u, d := pick()
		var id [16]byte
		list = append(list, attack{name: name, user: u, build: func(ri *RoundInfo) []byte {
			cmd := Command{Timestamp: w.now, Payload: []byte(name)}
			rand.Read(cmd.ID[:])
			id = cmd.ID
			m1, _, err := issueCommand(ri, &w.creds[d.v][d.d], 1, &cmd, func(v, n int, r io.Reader) (ShareSeed, Share, error) {
				x := make([]Elem, n)
				x[v] = 1
				mutate(x, v)
				return splitVector(x, r, badMask)
			}, rand.Reader)
			if err != nil {
				panic(err)
			}
			return m1
		}, check: invalid(notDelivered(&id))})
	}
	badShare("shares-M·e_v", func(x []Elem, v int) { x[v] = 1000 }, false)
	badShare("shares-e_u+e_v", func(x []Elem, v int) { x[(v+1)%len(x)] = 1 }, false)
	badShare("shares-−e_v", func(x []Elem, v int) { x[v] = Elem(1).Neg() }, false)
	badShare("shares-zero", func(x []Elem, v int) { x[v] = 0 }, false)
	badShare("shares-bad-mask", func(x []Elem, v int) {}, true)

	// Wrong round: built for the previous round.
	u, d := pick()
	list = append(list, attack{name: "wrong-round", user: u, wantAdmit: ErrRound, build: func(ri *RoundInfo) []byte {
		old := *ri
		old.T--
		m1, _, err := IssueCommand(&old, &w.creds[d.v][d.d], 1, []byte("old"), w.now, rand.Reader)
		if err != nil {
			panic(err)
		}
		return m1
	}})
	// Wrong round with the clear header rewritten: the outer layer is bound
	// to t, so V* cannot open it and the message is dropped.
	u, d = pick()
	var rewrittenID [16]byte
	list = append(list, attack{name: "wrong-round-rewritten", user: u, build: func(ri *RoundInfo) []byte {
		old := *ri
		old.T--
		cmd := Command{Timestamp: w.now}
		rand.Read(cmd.ID[:])
		rewrittenID = cmd.ID
		m1, _, err := issueCommand(&old, &w.creds[d.v][d.d], 1, &cmd, SplitOneHot, rand.Reader)
		if err != nil {
			panic(err)
		}
		putHeader(m1, KindSubmission, ri.T)
		return m1
	}, check: invalid(notDelivered(&rewrittenID))})
	// Oversize and undersize.
	u, d = pick()
	list = append(list, attack{name: "oversize", user: u, wantAdmit: ErrSize, build: func(ri *RoundInfo) []byte {
		m1, _, _ := IssueCommand(ri, &w.creds[d.v][d.d], 1, nil, w.now, rand.Reader)
		return append(m1, 0)
	}})
	u, _ = pick()
	list = append(list, attack{name: "truncated", user: u, wantAdmit: ErrSize, build: func(ri *RoundInfo) []byte {
		return make([]byte, 5)
	}})
	u, _ = pick()
	list = append(list, attack{name: "payload-kind", user: u, wantAdmit: ErrKind, build: func(ri *RoundInfo) []byte {
		b := make([]byte, ri.Params.SubmissionSize())
		putHeader(b, KindForward, ri.T)
		return b
	}})
	// Random bytes of the right size: V* cannot open it.
	u, _ = pick()
	list = append(list, attack{name: "garbage-outer", user: u, build: func(ri *RoundInfo) []byte {
		b := make([]byte, ri.Params.SubmissionSize())
		rand.Read(b)
		putHeader(b, KindSubmission, ri.T)
		return b
	}, check: invalid(func(testing.TB, *roundResult, int) {})})
	// A valid outer layer and shares around an inner layer the integrator
	// cannot open: it passes G2, becomes a void position.
	u, d = pick()
	list = append(list, attack{name: "garbage-inner", user: u, build: func(ri *RoundInfo) []byte {
		inner := make([]byte, ri.Params.InnerSize())
		rand.Read(inner)
		seed, s2, _ := SplitOneHot(int(d.v), ri.Params.Vendors, rand.Reader)
		var kV [KeySize]byte
		m1, err := wrapSubmission(ri, inner, seed, &s2, &kV)
		if err != nil {
			panic(err)
		}
		return m1
	}, check: func(tb testing.TB, res *roundResult, idx int) {
		if res.iview.void != 1 {
			tb.Fatalf("void positions = %d, want 1", res.iview.void)
		}
	}})
	// Duplicate z: two colluding users submit for the same device and slot.
	// Exactly one copy reaches the device (O6), nobody else is affected.
	du1, dd := pick()
	du2, _ := pick()
	for i, uu := range []int{du1, du2} {
		list = append(list, attack{name: fmt.Sprintf("duplicate-z#%d", i), group: "duplicate-z", user: uu, build: func(ri *RoundInfo) []byte {
			m1, _, err := IssueCommand(ri, &w.creds[dd.v][dd.d], 1, []byte("dup"), w.now, rand.Reader)
			if err != nil {
				panic(err)
			}
			return m1
		}})
	}
	// Same-round replay of one M1 under three users' tokens (issue 15 #1:
	// the G2 "M·e_v burst" by replay alone). Every copy passes G2's share
	// check, so V* must recognise the copies itself: all of them are
	// invalid, the first included, none reaches a device, and no burst
	// or duplicate z tells the integrator the victim's vendor.
	ru1, rd := pick()
	ru2, _ := pick()
	ru3, _ := pick()
	var replayed []byte
	var replayID [16]byte
	rand.Read(replayID[:])
	for i, uu := range []int{ru1, ru2, ru3} {
		list = append(list, attack{name: fmt.Sprintf("replay-same-round#%d", i), user: uu, build: func(ri *RoundInfo) []byte {
			if replayed == nil {
				var err error
				replayed, _, err = IssueCommandID(ri, &w.creds[rd.v][rd.d], 1, replayID, []byte("replay"), w.now, rand.Reader)
				if err != nil {
					panic(err)
				}
			}
			return replayed
		}, check: invalid(func(tb testing.TB, res *roundResult, idx int) {
			notDelivered(&replayID)(tb, res, idx)
			if res.stats.Replayed != 3 {
				tb.Fatalf("V* invalidated %d copies of the replayed envelope, want all 3", res.stats.Replayed)
			}
		})})
	}
	return list
}

// TestDeviceRejectsReplayedCommand is spec §9.3 #17: a command with a seen
// cmd_id or an old timestamp is not executed by the device, even when it
// arrives through a fresh, valid round (a seen id with its original issue
// time is answered from memory, TestDeviceRetryExactlyOnce).
func TestDeviceRejectsReplayedCommand(t *testing.T) {
	cfg := engineConfig(1)
	cfg.deviceCounts, cfg.users = []int{3, 3, 3, 3, 3}, 5
	cfg.policy = []TargetPolicy{{2, 0}, {2, 0}, {2, 0}, {2, 0}, {2, 0}}
	cfg.capacity, cfg.quantum = []int{8, 8, 8, 8, 8}, 8
	w := newWorld(t, cfg)
	var d devRef
	var u int
	for u = range w.owned {
		if len(w.owned[u]) > 0 {
			d = w.owned[u][0]
			break
		}
	}
	cmd := Command{Timestamp: w.now.Add(2 * time.Second), Payload: []byte("unlock")}
	rand.Read(cmd.ID[:])
	replay := func(ts time.Time) attack {
		return attack{name: "replay", user: u, build: func(ri *RoundInfo) []byte {
			c := cmd
			c.Timestamp = ts
			m1, _, err := issueCommand(ri, &w.creds[d.v][d.d], 1, &c, SplitOneHot, rand.Reader)
			if err != nil {
				panic(err)
			}
			return m1
		}}
	}
	res := w.runRound(t, roundPlan{attacks: []attack{replay(cmd.Timestamp)}})
	if res.deviceIDs[cmd.ID] != 1 {
		t.Fatal("original command not delivered")
	}
	res = w.runRound(t, roundPlan{attacks: []attack{replay(cmd.Timestamp)}})
	if res.deviceIDs[cmd.ID] != 0 {
		t.Fatal("replayed command id executed")
	}
	cmd.ID[0] ^= 1
	res = w.runRound(t, roundPlan{attacks: []attack{replay(w.now.Add(-time.Hour))}})
	if res.deviceIDs[cmd.ID] != 0 {
		t.Fatal("stale timestamp accepted")
	}
}

// TestRateLimitAndClosedRound is spec §9.3 #18.
func TestRateLimitAndClosedRound(t *testing.T) {
	p := Params{Vendors: 2, Q: 1, CommandSize: 128, ResponseSize: 64, Suite: SuiteX25519}
	ik, _ := GenerateKey(p.Suite)
	vk, _ := GenerateKey(p.Suite)
	in, _ := NewIntegrator(p, ik)
	ri := &RoundInfo{T: 9, Shuffler: 1, Params: p, IntegratorKey: ik.PublicKey(), ShufflerKey: vk.PublicKey()}
	ir, err := in.NewRound(ri, []uint64{3, 3})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewDeviceSecret(rand.Reader)
	dev := DeviceCredentials{Vendor: 0, Keys: s.Keys()}
	m1, _, err := IssueCommand(ri, &dev, 1, nil, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ir.Admit("u", m1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ir.Admit("u", m1); !errors.Is(err, ErrRateLimit) {
		t.Fatalf("second message from a q=1 user: %v", err)
	}
	if _, err := ir.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ir.Admit("v", m1); !errors.Is(err, ErrRoundClosed) {
		t.Fatalf("admit after close: %v", err)
	}
	if _, _, err := IssueCommand(ri, &dev, 2, nil, time.Now(), rand.Reader); !errors.Is(err, ErrParams) {
		t.Fatalf("slot j > q: %v", err)
	}
	big := make([]byte, p.MaxCommandPayload()+1)
	if _, _, err := IssueCommand(ri, &dev, 1, big, time.Now(), rand.Reader); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("oversize payload: %v", err)
	}
}
