package mohito

import (
	"bytes"
	"crypto/rand"
	"slices"
	"testing"
)

// TestEphemeralIDsNeverRepeat is spec §9 invariant #12 (first half): no z repeats across
// rounds × devices × slots — here 400 rounds × 1 250 devices × q = 2 = 10⁶ ids (40 rounds
// with -short). Round ids are strictly increasing but not contiguous: the second half
// runs at 2³² + the first half's ids, so a t truncated to 32 bits, or a z that ignored j
// or t, repeats at once. Every round
// consumes a fresh t, whatever became of the previous one (spec O2): some rounds run to
// delivery, some abort after users submitted (the integrator closes, the shuffler never
// answers), and the rest abort before any submission; all of their ids count. Every
// vendor derives the ids of all its devices in every round (its decode pattern), and for
// the aborted rounds' submissions the user's z (PendingCommand.Z) and the device's own
// derivation must be that same z, so the ids checked are the ones actually used.
func TestEphemeralIDsNeverRepeat(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 40
	}
	p := Params{Vendors: 4, Q: 2, CommandSize: 160, ResponseSize: 64, Suite: SuiteX25519}
	w := newWorld(t, worldConfig{
		params:       p,
		deviceCounts: []int{250, 300, 325, 375},
		users:        200,
		delta:        2,
		policy:       []TargetPolicy{{4, 2}, {4, 2}, {4, 2}, {4, 2}},
		capacity:     []int{64, 64, 64, 64},
		quantum:      64,
		seed:         12,
	})
	const t0, jump = 1000, 1 << 32
	w.t = t0 - 1
	devices := 0
	all := make([][]int, p.Vendors)
	for v := range p.Vendors {
		devices += len(w.devices[v])
		for d := range w.devices[v] {
			all[v] = append(all[v], d)
		}
	}
	ids := make([]EphemeralID, 0, rounds*devices*p.Q)
	patterns := func(ri *RoundInfo) [][]EphemeralID {
		out := make([][]EphemeralID, p.Vendors)
		for v, vend := range w.vendors {
			vr, err := vend.NewRound(ri, all[v])
			if err != nil {
				t.Fatal(err)
			}
			out[v] = vr.DecodePattern()
			ids = append(ids, out[v]...)
		}
		return out
	}
	delivered, abortedAfterSubmit, seenT := 0, 0, map[uint64]bool{}
	for r := range rounds {
		if r == rounds/2 {
			w.t = jump + t0 - 1
		}
		var ri *RoundInfo
		switch r % 20 {
		case 0: // a whole round
			res := w.runRound(t, roundPlan{intents: w.honestIntents(30, nil)})
			delivered += res.delivered
			ri = res.info
			patterns(ri)
		case 10: // aborted after submissions
			ri = w.nextRoundInfo()
			pat := patterns(ri)
			targets, err := DrawTargets(w.cfg.policy, w.cfg.delta, rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			ir, err := w.integ.NewRound(ri, targets)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range w.honestIntents(30, nil) {
				m1, pc, err := IssueCommand(ri, &w.creds[in.dev.v][in.dev.d], in.j, []byte("aborted"), w.now, rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				if want := pat[in.dev.v][in.dev.d*p.Q+int(in.j)-1]; pc.Z != want || pc.T != ri.T {
					t.Fatalf("round %d: the user's z for device %v slot %d is not the vendor's", ri.T, in.dev, in.j)
				}
				if z := w.devices[in.dev.v][in.dev.d].ids.Derive(in.j, ri.T); z != pc.Z {
					t.Fatalf("round %d: the device's z differs from the user's", ri.T)
				}
				if _, _, err := ir.Admit(userName(in.user), m1); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ir.Close(); err != nil {
				t.Fatal(err)
			}
			abortedAfterSubmit++
		default: // aborted before any submission: only the t is consumed
			ri = w.nextRoundInfo()
			patterns(ri)
		}
		if seenT[ri.T] {
			t.Fatalf("round id %d reused", ri.T)
		}
		seenT[ri.T] = true
	}
	if want := rounds * devices * p.Q; len(ids) != want {
		t.Fatalf("%d ids, want %d", len(ids), want)
	}
	if delivered == 0 || abortedAfterSubmit == 0 {
		t.Fatalf("delivered %d commands, %d rounds aborted after submissions", delivered, abortedAfterSubmit)
	}
	slices.SortFunc(ids, func(a, b EphemeralID) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("z %x repeats", ids[i])
		}
	}
	t.Logf("%d ids over %d rounds (t in [%d, %d) and 2³² + the same, %d delivered commands, %d rounds aborted after submissions): no repeat",
		len(ids), rounds, t0, t0+rounds/2, delivered, abortedAfterSubmit)
}
