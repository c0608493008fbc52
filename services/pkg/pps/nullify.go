package pps

import (
	"errors"
	"fmt"
)

// ErrInsufficient: fewer valid inputs than the function's minInputs; the Broker publishes
// status "insufficient" (the ideal functionality's ⊥) and does not garble (spec §8.6, D12).
var ErrInsufficient = errors.New("pps: not enough valid inputs")

// NullReason says why a slot's input is replaced by its nullifying value.
type NullReason uint8

const (
	// Valid: the slot's labels are used.
	Valid NullReason = iota
	// Missing: no labels arrived within the window t (spec §2.4 step 2).
	Missing
	// Inconsistent: at least one label failed the consistency check (spec §3.4).
	Inconsistent
	// NotAllowed: the publisher's policy does not allow the function (spec §2.4 step 5).
	NotAllowed
	// Erased: the Garbler no longer holds the round's seed (ErrRoundErased, spec §10 #8).
	Erased
)

func (r NullReason) String() string {
	switch r {
	case Valid:
		return "valid"
	case Missing:
		return "missing"
	case Inconsistent:
		return "inconsistent"
	case NotAllowed:
		return "not-allowed"
	case Erased:
		return "erased"
	}
	return fmt.Sprintf("NullReason(%d)", uint8(r))
}

// SlotSource says which of a topic's values a slot takes (D9).
type SlotSource uint8

const (
	// Latest is `(val "<topic>")`: the latest value within the window t.
	Latest SlotSource = iota
	// Window is one of `(window "<topic>" N)`: the value Lag rounds before the latest.
	Window
	// Static is `(static "<topic>")`: a value the Broker retains, such as a log-distance.
	Static
)

// SlotSpec is one input slot of a function: the topic it reads, which of its values, and
// its nullifying value, the identity element of the operation that consumes it (D12: 0 for
// +, One for ×, MaxFixed for min, MinFixed for max).
type SlotSpec struct {
	Topic    string
	Source   SlotSource
	Lag      int
	Identity Fixed
}

// InputLayout is the input side of a compiled function. The circuit's inputs are one
// 32-bit value per slot (bit j of slot s on wire 32·s + j, spec §8) followed by one validity
// bit per slot (wire 32·len(Slots) + s), which the Garbler always hard-wires (D12): builtins
// that divide by the number of inputs count these bits, so nullification changes n.
type InputLayout struct {
	Slots []SlotSpec
	// MinInputs is the fewest valid slots for which the function is computed (D12, D13).
	MinInputs int
}

// InputWires is the number of circuit input wires of the layout.
func (l *InputLayout) InputWires() int { return len(l.Slots) * (ValueBits + 1) }

// ValidityWire is the input wire carrying slot s's validity bit.
func (l *InputLayout) ValidityWire(s int) int { return len(l.Slots)*ValueBits + s }

// Assignment is one execution's decision about every slot (spec §8.8:
// N = missing ∪ slotsOf(bad) ∪ slots of publishers not in P_C).
type Assignment struct {
	layout  *InputLayout
	reasons []NullReason
	valid   int
}

// Nullify decides the slots of one execution. nulls maps nullified slots to their reason;
// slots not in it are valid. If fewer than MinInputs slots stay valid it returns the
// assignment together with ErrInsufficient.
func Nullify(layout *InputLayout, nulls map[int]NullReason) (*Assignment, error) {
	a := &Assignment{layout: layout, reasons: make([]NullReason, len(layout.Slots))}
	for s, r := range nulls {
		if s < 0 || s >= len(layout.Slots) {
			return nil, fmt.Errorf("nullify slot %d of %d", s, len(layout.Slots))
		}
		a.reasons[s] = r
	}
	for _, r := range a.reasons {
		if r == Valid {
			a.valid++
		}
	}
	if a.valid < max(layout.MinInputs, 1) {
		return a, fmt.Errorf("%d valid inputs, function needs %d: %w", a.valid, max(layout.MinInputs, 1), ErrInsufficient)
	}
	return a, nil
}

// Reason is why slot s is (not) used.
func (a *Assignment) Reason(s int) NullReason { return a.reasons[s] }

// ValidCount is the number of slots whose labels are used.
func (a *Assignment) ValidCount() int { return a.valid }

// Nullified lists the nullified slots in ascending order (the garble request's N).
func (a *Assignment) Nullified() []uint32 {
	var out []uint32
	for s, r := range a.reasons {
		if r != Valid {
			out = append(out, uint32(s))
		}
	}
	return out
}

// ConstInput says how the Garbler feeds input wire u: a constant (a nullified slot's
// identity bit, or any validity bit) or, when isConst is false, the publisher's labels
// through an identity gate (spec §3.5).
func (a *Assignment) ConstInput(u int) (isConst, bit bool) {
	n := len(a.reasons)
	switch {
	case u < n*ValueBits:
		s, j := u/ValueBits, u%ValueBits
		if a.reasons[s] == Valid {
			return false, false
		}
		return true, uint32(a.layout.Slots[s].Identity)>>j&1 == 1
	case u < n*(ValueBits+1):
		return true, a.reasons[u-n*ValueBits] == Valid
	}
	panic(fmt.Sprintf("pps: input wire %d of a %d-slot layout", u, n))
}

// ModelInputs is what the plaintext model computes on: every nullified value replaced by
// its slot's identity, and the validity bits.
func (a *Assignment) ModelInputs(values []Fixed) ([]Fixed, []bool) {
	xs := make([]Fixed, len(a.reasons))
	valid := make([]bool, len(a.reasons))
	for s, r := range a.reasons {
		xs[s], valid[s] = a.layout.Slots[s].Identity, r == Valid
		if r == Valid {
			xs[s] = values[s]
		}
	}
	return xs, valid
}
