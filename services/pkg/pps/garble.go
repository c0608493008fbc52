package pps

import (
	"errors"
	"fmt"
	"sync"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// SlotLabels gives the Garbler both labels of every bit of a valid slot's value,
// regenerated from its publisher's round seed (ValueLabels).
type SlotLabels func(slot int) (*[ValueBits]LabelPair, error)

// GarblerInputs is the Garbler's per-wire input for gc.Garble (spec §8.5): a nullified slot's
// bits and every validity bit are constants (one label each in the stream, so Δ stays
// hidden), and a valid slot's bits are its publisher's label pairs behind identity gates.
// The consistency check runs first and turns every slot whose labels the Garbler cannot
// derive into a nullified one, so an error here aborts the execution.
func GarblerInputs(a *Assignment, labels SlotLabels) ([]gc.Input, error) {
	return GarblerInputsParallel(a, labels, 1)
}

// parallelSlotsMin is the number of slots below which GarblerInputsParallel stays on one
// goroutine (a slot's 32 label pairs are one 1 KiB ChaCha20 keystream, ≈ 2–5 µs).
const parallelSlotsMin = 256

// GarblerInputsParallel is GarblerInputs with the slots' labels derived on up to workers
// goroutines, each over a contiguous range of slots; labels must then be safe to call
// concurrently for different slots. The result is the same as GarblerInputs'.
func GarblerInputsParallel(a *Assignment, labels SlotLabels, workers int) ([]gc.Input, error) {
	in := make([]gc.Input, a.layout.InputWires())
	n := len(a.reasons)
	workers = max(1, min(workers, n/parallelSlotsMin))
	fill := func(from, to int) error {
		for s := from; s < to; s++ {
			if a.reasons[s] != Valid {
				continue
			}
			pairs, err := labels(s)
			if err != nil {
				return fmt.Errorf("garbler inputs: labels of slot %d: %w", s, err)
			}
			for j := range ValueBits {
				in[s*ValueBits+j] = gc.Input{A0: gc.Label(pairs[j][0]), A1: gc.Label(pairs[j][1])}
			}
			for j := range pairs {
				clear(pairs[j][0][:])
				clear(pairs[j][1][:])
			}
		}
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		from, to := n*w/workers, n*(w+1)/workers
		if w == workers-1 {
			errs[w] = fill(from, to) // the last range on this goroutine
			continue
		}
		wg.Go(func() { errs[w] = fill(from, to) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		clear(in)
		return nil, err
	}
	for u := range in {
		if isConst, bit := a.ConstInput(u); isConst {
			in[u] = gc.Input{Const: true, Bit: bit}
		}
	}
	return in, nil
}

// ValueInputs derives the label pairs of value index v of a message published with round
// seed s_k (exactly ValueLabels') straight into dst[0:ValueBits] as identity-gate inputs,
// bit j in dst[j], without ValueLabels' intermediate copies. The Garbler derives a slot's
// inputs this way as its publisher's seeds arrive (GarblerInputsDerived).
func ValueInputs(seed *Seed, v int, dst []gc.Input) {
	if v < 0 {
		panic(fmt.Sprintf("pps: negative value index %d", v))
	}
	dst = dst[:ValueBits]
	var buf [valueLabelBytes]byte
	valueKeystream(seed, v, &buf)
	for j := range dst {
		in := &dst[j]
		in.Const, in.Bit = false, false
		copy(in.A0[:], buf[32*j:32*j+16])
		copy(in.A1[:], buf[32*j+16:32*j+32])
		in.A1[0] = in.A1[0]&0xFE | (1 ^ in.A0[0]&1)
	}
	clear(buf[:])
}

// GarblerInputsDerived is GarblerInputs over in, the execution's input wires into which the
// valid slots' inputs were derived already (ValueInputs, slot s at wires s·ValueBits…), in
// place: derived(s) says whether slot s's were, and labels derives any valid slot's that were
// not. Every constant wire is set as GarblerInputs sets it, which also erases the labels of a
// slot derived but then nullified. The result (in itself) is GarblerInputs'.
func GarblerInputsDerived(a *Assignment, in []gc.Input, derived func(slot int) bool, labels SlotLabels) ([]gc.Input, error) {
	if len(in) != a.layout.InputWires() {
		return nil, fmt.Errorf("garbler inputs: %d input wires, the layout has %d", len(in), a.layout.InputWires())
	}
	for s, r := range a.reasons {
		if r != Valid || derived(s) {
			continue
		}
		pairs, err := labels(s)
		if err != nil {
			clear(in)
			return nil, fmt.Errorf("garbler inputs: labels of slot %d: %w", s, err)
		}
		for j := range ValueBits {
			in[s*ValueBits+j] = gc.Input{A0: gc.Label(pairs[j][0]), A1: gc.Label(pairs[j][1])}
		}
		for j := range pairs {
			clear(pairs[j][0][:])
			clear(pairs[j][1][:])
		}
	}
	for u := range in {
		if isConst, bit := a.ConstInput(u); isConst {
			in[u] = gc.Input{Const: true, Bit: bit}
		}
	}
	return in, nil
}

// EvaluatorLabels is the Broker's per-wire input for gc.Evaluate: the label it received for
// each bit of a valid slot (received(s) returns the slot's 32 labels, bit 0 first); wires
// the Garbler hard-wires are left zero (the stream carries their labels).
func EvaluatorLabels(a *Assignment, received func(slot int) []Label) ([]gc.Label, error) {
	out := make([]gc.Label, a.layout.InputWires())
	for s, r := range a.reasons {
		if r != Valid {
			continue
		}
		ls := received(s)
		if len(ls) != ValueBits {
			return nil, fmt.Errorf("evaluator labels: slot %d has %d labels, want %d: %w", s, len(ls), ValueBits, ErrMalformed)
		}
		for j, l := range ls {
			out[s*ValueBits+j] = gc.Label(l)
		}
	}
	return out, nil
}
