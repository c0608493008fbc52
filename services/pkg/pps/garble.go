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
