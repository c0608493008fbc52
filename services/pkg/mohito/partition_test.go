package mohito

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPartitionEquivalence is spec §9 invariant #7: the per-vendor command tables and the
// commands delivered to devices are identical whatever the split of the integrator's work
// over W decrypt workers and P encoder partitions, W, P ∈ {1, 2, 7, 32}. One round (9
// vendors, 500 commands, three pairs of commands colliding on one device slot so the
// O6 duplicate path is exercised) is closed once; then for every (W, P) the N shuffled
// positions are cut into W contiguous ranges, each read from the shuffler in M4 batches and
// opened by its own goroutine (results gathered in completion order), and the vendors are
// dealt to P partitions (v mod P), each encoding its vendors concurrently from the same
// per-vendor seeded randomness. The encoder's input is the vendor's entries in output
// position order (so O6 keeps the duplicate at the lower position whatever the arrival
// order). Asserted against (W, P) = (1, 1): the opened entries (position, vendor, z,
// ciphertext, k_I^resp; undecryptable positions as a set), every M5 table byte for byte,
// every response slot, and every command each device opens from its vendor's decode.
func TestPartitionEquivalence(t *testing.T) {
	const vendors = 9
	p := Params{Vendors: vendors, Q: 2, CommandSize: 160, ResponseSize: 64, Suite: SuiteX25519}
	cfg := worldConfig{params: p, users: 400, delta: 2, quantum: 64, seed: 7}
	for v := range vendors {
		cfg.deviceCounts = append(cfg.deviceCounts, 20+40*v)
		cfg.policy = append(cfg.policy, TargetPolicy{4, 2})
		cfg.capacity = append(cfg.capacity, 200)
	}
	w := newWorld(t, cfg)
	ri := w.nextRoundInfo()
	intents := w.honestIntents(494, nil)
	for i := range 3 { // another user commands the same device slot: the same z (O6)
		d := intents[i]
		d.user = (d.user + 1) % cfg.users
		intents = append(intents, d)
	}
	targets, err := DrawTargets(cfg.policy, cfg.delta, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ir, err := w.integ.NewRound(ri, targets)
	if err != nil {
		t.Fatal(err)
	}
	sh := w.shufflers[ri.Shuffler]
	sr, err := sh.NewRound(ri, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range intents {
		payload := fmt.Appendf(nil, "cmd u%d v%d d%d j%d", in.user, in.dev.v, in.dev.d, in.j)
		m1, _, err := IssueCommand(ri, &w.creds[in.dev.v][in.dev.d], in.j, payload, w.now, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		_, m2, err := ir.Admit(userName(in.user), m1)
		if err != nil {
			t.Fatal(err)
		}
		idx, layer, err := sh.OpenForward(ri.T, m2)
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.Accept(idx, layer); err != nil {
			t.Fatal(err)
		}
	}
	m3, err := ir.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.Close(m3); err != nil {
		t.Fatal(err)
	}
	ch, err := sr.Challenge()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := ir.Reply(ch)
	if err != nil {
		t.Fatal(err)
	}
	verdict, err := sr.Verdict(reply)
	if err != nil {
		t.Fatal(err)
	}
	fin, err := ir.Finish(verdict)
	if err != nil {
		t.Fatal(err)
	}
	summary, err := sr.Finish(fin)
	if err != nil {
		t.Fatal(err)
	}
	sum, _, err := ir.AcceptSummary(summary)
	if err != nil {
		t.Fatal(err)
	}
	n := sum.N

	type outcome struct {
		opened    []ShuffledCommand // by position, vendor entries only
		void      []uint32
		tables    [][]byte
		slots     [][]ResponseSlot
		delivered map[devRef][]string
		dupes     int
	}
	stageA := func(W int) []ShuffledCommand {
		// Stage A: W workers over contiguous ranges, gathered in completion order.
		got := make(chan []ShuffledCommand, W*(n/outBatch+2))
		var wg sync.WaitGroup
		per := (n + W - 1) / W
		for lo := 0; lo < n; lo += per {
			hi := min(lo+per, n)
			wg.Go(func() {
				for s := lo; s < hi; s += outBatch {
					m4, err := sr.Output(s, min(outBatch, hi-s))
					if err != nil {
						t.Error(err)
						return
					}
					cmds, _, err := w.integ.OpenShuffled(ri.T, m4, n, nil)
					if err != nil {
						t.Error(err)
						return
					}
					got <- cmds
				}
			})
		}
		wg.Wait()
		close(got)
		var cmds []ShuffledCommand
		for c := range got {
			cmds = append(cmds, c...)
		}
		if len(cmds) != n {
			t.Fatalf("W=%d: %d entries opened of %d", W, len(cmds), n)
		}
		return cmds
	}
	run := func(cmds []ShuffledCommand, P int) *outcome {
		var wg sync.WaitGroup
		o := &outcome{tables: make([][]byte, vendors), slots: make([][]ResponseSlot, vendors), delivered: map[devRef][]string{}}
		byVendor, void := GroupByVendor(cmds, vendors)
		for _, c := range void {
			o.void = append(o.void, c.Pos)
		}
		slices.Sort(o.void)
		// Stage C: P partitions, each encoding its vendors (v mod P) concurrently.
		dupes := make([]int, vendors)
		for part := range P {
			wg.Go(func() {
				for v := part; v < vendors; v += P {
					in := slices.SortedFunc(slices.Values(byVendor[v]), func(a, b ShuffledCommand) int { return cmp.Compare(a.Pos, b.Pos) })
					capacity := CommandCapacity(len(in), cfg.capacity[v])
					table, sl, d, err := EncodeCommandTable(p, in, capacity, newDetReader(fmt.Sprintf("encode/%d/%d", ri.T, v)))
					if err != nil {
						t.Error(err)
						return
					}
					if o.tables[v], err = MarshalTable(KindCommandTable, ri.T, uint32(v), capacity, table); err != nil {
						t.Error(err)
						return
					}
					o.slots[v], dupes[v] = sl, d
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for v := range vendors {
			o.opened = append(o.opened, byVendor[v]...)
			o.dupes += dupes[v]
		}
		slices.SortFunc(o.opened, func(a, b ShuffledCommand) int { return cmp.Compare(a.Pos, b.Pos) })
		// C6–C7: each vendor decodes for all its devices; fresh devices open their slots.
		for v := range vendors {
			table, _, err := ParseCommandTable(p, ri.T, uint32(v), cfg.capacity[v], o.tables[v])
			if err != nil {
				t.Fatal(err)
			}
			active := make([]int, len(w.devices[v]))
			for d := range active {
				active[d] = d
			}
			vr, err := w.vendors[v].NewRound(ri, active)
			if err != nil {
				t.Fatal(err)
			}
			m6s, err := vr.DecodeCommands(table)
			if err != nil {
				t.Fatal(err)
			}
			for d, m6 := range m6s {
				k := w.creds[v][d].Keys
				dev := &Device{params: p, keys: k, ids: NewIDDeriver(&k.PRF), skew: time.Minute, seen: map[[16]byte]*seenCommand{}}
				_, dslots, err := dev.ReceiveCommands(m6, w.now)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range dslots {
					if s.Command != nil {
						o.delivered[devRef{v, d}] = append(o.delivered[devRef{v, d}], fmt.Sprintf("j%d %x %s", s.J, s.Command.ID, s.Command.Payload))
					}
				}
			}
		}
		return o
	}

	ref := run(stageA(1), 1)
	delivered := 0
	for _, cs := range ref.delivered {
		delivered += len(cs)
	}
	// Every device slot commanded gets exactly one command: 494 distinct slots, the three
	// colliding commands lose (O6).
	// The N positions are the k commands plus fakes (bursts, G3): all of them open.
	if delivered != 494 || ref.dupes != 3 || len(ref.opened)+len(ref.void) != n || n <= len(intents) {
		t.Fatalf("reference run: %d delivered, %d duplicates, %d+%d opened of N=%d; want 494, 3, N > %d", delivered, ref.dupes, len(ref.opened), len(ref.void), n, len(intents))
	}
	for _, W := range []int{1, 2, 7, 32} {
		cmds := stageA(W)
		for _, P := range []int{1, 2, 7, 32} {
			o := run(cmds, P)
			if !slices.EqualFunc(o.opened, ref.opened, func(a, b ShuffledCommand) bool {
				return a.Pos == b.Pos && a.Vendor == b.Vendor && a.Z == b.Z && a.RespKey == b.RespKey && bytes.Equal(a.DeviceCiphertext, b.DeviceCiphertext)
			}) || !slices.Equal(o.void, ref.void) {
				t.Errorf("W=%d P=%d: opened entries differ", W, P)
			}
			for v := range vendors {
				if !bytes.Equal(o.tables[v], ref.tables[v]) {
					t.Errorf("W=%d P=%d: vendor %d table differs", W, P, v)
				}
				if !slices.Equal(o.slots[v], ref.slots[v]) {
					t.Errorf("W=%d P=%d: vendor %d response slots differ", W, P, v)
				}
			}
			if len(o.delivered) != len(ref.delivered) {
				t.Errorf("W=%d P=%d: %d devices received commands, want %d", W, P, len(o.delivered), len(ref.delivered))
			}
			for d, cs := range ref.delivered {
				if !slices.Equal(o.delivered[d], cs) {
					t.Errorf("W=%d P=%d: device %v got %q, want %q", W, P, d, o.delivered[d], cs)
				}
			}
		}
	}
}
