package pps_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// The publisher–Broker collusion of spec §2.6.1. Slot 0's publisher is corrupt and hands the
// Broker everything it knows (its round seed); slot 1's is honest. The function compares
// them, so a Broker that can evaluate the one garbled circuit on inputs of its choice finds
// the honest value by binary search, and the output mask r with it.
const compareSource = `(begin (define c (val "colluder")) (define h (val "honest")) (start-building) (< c h))`

const colluder, honest = 0, 1

// faithfulRun is one faithful execution (spec §8.3–§8.6, every slot valid; the colluder's
// labels are valid, so the consistency check would pass them).
type faithfulRun struct {
	stream   []byte
	received map[int][]pps.Label
	inputs   []gc.Input
	a        *pps.Assignment
	mask     []byte
}

func (w *world) runFaithful(values []pps.Fixed) *faithfulRun {
	t := w.t
	run := &faithfulRun{received: map[int][]pps.Label{}}
	for s := range w.f.Layout.Slots {
		seed := w.publisherSeed(s)
		ls, err := pps.SplitPublished(pps.PublishLabels(&seed, values[s:s+1]), 1)
		if err != nil {
			t.Fatal(err)
		}
		run.received[s] = ls
	}
	a, err := pps.Nullify(&w.f.Layout, nil)
	if err != nil {
		t.Fatal(err)
	}
	run.a = a
	run.inputs, err = pps.GarblerInputs(a, func(s int) (*[pps.ValueBits]pps.LabelPair, error) {
		seed, err := w.garblerSeed(s)
		if err != nil {
			return nil, err
		}
		l := pps.ValueLabels(&seed, 0)
		return &l, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, fseed := w.keys.AllocateRound()
	run.mask = pps.OutputMask(&fseed, w.f.OutputBits())
	var stream bytes.Buffer
	if _, err := gc.Garble(context.Background(), w.plan, &stream, run.inputs, run.mask, nil); err != nil {
		t.Fatal(err)
	}
	run.stream = stream.Bytes()
	return run
}

// evaluate is the Broker evaluating the one garbled stream it received, again, on labels of
// its choice; it returns the masked output bit.
func (w *world) evaluate(stream []byte, labels []gc.Label) byte {
	res, err := gc.Evaluate(context.Background(), w.plan, bytes.NewReader(stream), labels, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return res.Masked[0] & 1
}

// withColluder returns labels with the colluder's 32 wires set by pick(j).
func withColluder(labels []gc.Label, pick func(j int) gc.Label) []gc.Label {
	out := append([]gc.Label(nil), labels...)
	for j := range pps.ValueBits {
		out[colluder*pps.ValueBits+j] = pick(j)
	}
	return out
}

// binarySearchAttack is the Broker's attack on `c < h` given an oracle evaluating the
// garbled circuit with the colluder's input set to a: at a = MaxFixed the comparison is 0, so
// the masked bit is r; then the smallest a with (a < h) = 0 is h, after 32 more evaluations.
func binarySearchAttack(eval func(a pps.Fixed) byte) (h pps.Fixed, r byte) {
	r = eval(pps.MaxFixed)
	lo, hi := int64(pps.MinFixed), int64(pps.MaxFixed)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if eval(pps.Fixed(mid))^r == 0 { // mid ≥ h
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return pps.Fixed(lo), r
}

// TestFaithfulCollusionBrokerRecoversHonestInputAndMask shows the leak of §2.6.1 in faithful
// mode: the colluder's seed gives the Broker both labels of each of the colluder's wires
// (they are the Garbler's identity-gate inputs), so the Broker evaluates the one garbled
// circuit 33 times on inputs of its choice and recovers the honest publisher's exact value
// and the output mask bit r, hence the output, which the ideal functionality never gives it.
func TestFaithfulCollusionBrokerRecoversHonestInputAndMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	w := newWorld(t, compareSource)
	if w.f.Layout.Slots[colluder].Topic != "colluder" {
		t.Fatalf("slot order: %+v", w.f.Layout.Slots)
	}
	for trial := range 4 {
		values := randomValues(rng, 2)
		run := w.runFaithful(values)
		seed := w.publisherSeed(colluder) // what the colluder hands over
		pairs := pps.ValueLabels(&seed, 0)
		for j := range pps.ValueBits {
			in := run.inputs[colluder*pps.ValueBits+j]
			if in.A0 != gc.Label(pairs[j][0]) || in.A1 != gc.Label(pairs[j][1]) {
				t.Fatalf("bit %d: the colluder's pair is not the Garbler's input pair", j)
			}
		}
		honestLabels, err := pps.EvaluatorLabels(run.a, func(s int) []pps.Label { return run.received[s] })
		if err != nil {
			t.Fatal(err)
		}
		evals := 0
		got, r := binarySearchAttack(func(a pps.Fixed) byte {
			evals++
			return w.evaluate(run.stream, withColluder(honestLabels, func(j int) gc.Label {
				return gc.Label(pairs[j][uint32(a)>>j&1])
			}))
		})
		if got != values[honest] {
			t.Fatalf("trial %d: the attack found %d, honest value %d", trial, got, values[honest])
		}
		if r != run.mask[0]&1 {
			t.Fatalf("trial %d: the attack's r = %d, true r = %d", trial, r, run.mask[0]&1)
		}
		if evals > 33 {
			t.Fatalf("%d evaluations", evals)
		}
	}
}

// coalitionView is every 16-byte value the Broker and the colluding publisher hold after an
// H1 execution: the Broker's evaluator labels, the OT reply τ and each label ⊕ τ, and what
// the colluder's round seed yields (its faithful label pairs and the H1 mask key).
func coalitionView(w *world, run *hardenedRun) map[gc.Label]bool {
	v := map[gc.Label]bool{}
	for _, l := range run.labels {
		v[l] = true
		for _, tau := range run.reply.Tau {
			var x gc.Label
			for i := range x {
				x[i] = l[i] ^ tau[i]
			}
			v[x] = true
		}
	}
	for _, tau := range run.reply.Tau {
		v[gc.Label(tau)] = true
	}
	seed := w.publisherSeed(colluder)
	for _, p := range pps.ValueLabels(&seed, 0) {
		v[gc.Label(p[0])], v[gc.Label(p[1])] = true, true
	}
	k := pps.PRF(&seed, "pps/v1/h1-mask")
	var lo, hi gc.Label
	copy(lo[:], k[:16])
	copy(hi[:], k[16:])
	v[lo], v[hi] = true, true
	return v
}

// TestHardenedCollusionViewHoldsOneLabelPerWire: in H1 the coalition of the Broker and the
// colluding publisher holds exactly one label of every input wire, the one of the true
// value, and none of the colluder's seed-derived material is a label of the circuit.
func TestHardenedCollusionViewHoldsOneLabelPerWire(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	w := newWorld(t, compareSource)
	values := randomValues(rng, 2)
	run, err := w.runHardened(values, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	view := coalitionView(w, run)
	seed := w.publisherSeed(colluder)
	pairs := pps.ValueLabels(&seed, 0)
	for s := range 2 {
		for j := range pps.ValueBits {
			u := s*pps.ValueBits + j
			in := run.garbling.Inputs[u]
			x := uint32(values[s]) >> j & 1
			own, other := in.A0, in.A1
			if x == 1 {
				own, other = other, own
			}
			if run.labels[u] != own {
				t.Fatalf("slot %d bit %d: the Broker's label is not the label of the true bit", s, j)
			}
			if view[other] {
				t.Fatalf("slot %d bit %d: the coalition holds the other label", s, j)
			}
			for _, p := range pairs {
				if gc.Label(p[0]) == in.A0 || gc.Label(p[1]) == in.A0 || gc.Label(p[0]) == in.A1 || gc.Label(p[1]) == in.A1 {
					t.Fatalf("slot %d bit %d: a label derived from the colluder's seed is a circuit label", s, j)
				}
			}
		}
	}
}

// TestHardenedCollusionBinarySearchFails runs the faithful attack in H1 with the best the
// coalition has: the Broker's OT label where the wanted bit is the colluder's published bit,
// and otherwise the colluder's seed-derived label (no circuit label exists in its view). The
// evaluations off the published input are garbage, and the attack does not find the honest
// value.
func TestHardenedCollusionBinarySearchFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	w := newWorld(t, compareSource)
	for trial := range 4 {
		values := randomValues(rng, 2)
		run, err := w.runHardened(values, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		seed := w.publisherSeed(colluder)
		pairs := pps.ValueLabels(&seed, 0)
		published := uint32(values[colluder])
		got, _ := binarySearchAttack(func(a pps.Fixed) byte {
			return w.evaluate(run.stream, withColluder(run.labels, func(j int) gc.Label {
				want := uint32(a) >> j & 1
				if want == published>>j&1 {
					return run.labels[colluder*pps.ValueBits+j]
				}
				return gc.Label(pairs[j][want])
			}))
		})
		if got == values[honest] {
			t.Fatalf("trial %d: the attack found the honest value %d in H1", trial, got)
		}
		// The one evaluation the ideal world allows, on the colluder's published value, is right.
		cmp := byte(0)
		if values[colluder] < values[honest] {
			cmp = 1
		}
		if o := w.unmask(run); o[0]&1 != cmp {
			t.Fatalf("trial %d: subscriber got %d, want %d", trial, o[0]&1, cmp)
		}
	}
}
