package pps

import (
	"fmt"

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
	in := make([]gc.Input, a.layout.InputWires())
	for s := range a.reasons {
		if a.reasons[s] != Valid {
			continue
		}
		pairs, err := labels(s)
		if err != nil {
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
