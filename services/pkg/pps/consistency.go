package pps

import (
	"context"
	"slices"
)

// Position is an input wire of a circuit: bit j of slot s is wire 32·s + j (spec §8).
type Position uint32

// PositionOf is the wire of bit j of slot s.
func PositionOf(slot, j int) Position { return Position(slot*ValueBits + j) }

// Slot is the input slot the wire belongs to.
func (p Position) Slot() int { return int(p) / ValueBits }

// Bit is the bit of its slot's value the wire carries.
func (p Position) Bit() int { return int(p) % ValueBits }

// ExecID names one execution; it makes tweaks and PSI transcripts unique (D22).
type ExecID [16]byte

// ReceivedLabel is the label w_b the Broker holds for a wire.
type ReceivedLabel struct {
	Pos   Position
	Label Label
}

// ConsistencyChecker is the Broker's side of the wire-label consistency check (spec §3.4,
// §8.4, D16): it returns the positions whose received label is not one of the Garbler's two
// labels for that same position. Only the Broker learns the result; it then tells the
// Garbler which slots to nullify. The check runs before garbling.
type ConsistencyChecker interface {
	Check(ctx context.Context, exec ExecID, received []ReceivedLabel) (bad []Position, err error)
}

// maskLabel is l ⊕ r_pos with r_pos = PRG_block(s2, pos): masking per position is what makes
// a valid label of another wire inconsistent (paper Fig. 4).
func maskLabel(l *Label, s2 *Seed, pos Position) Label {
	r := PRGBlock(s2, uint64(pos))
	var m Label
	for i := range m {
		m[i] = l[i] ^ r[i]
	}
	return m
}

// BadSlots is the sorted set of slots with at least one bad position: the publishers the
// Garbler must nullify (spec §3.4 step 8).
func BadSlots(bad []Position) []uint32 {
	slots := make([]uint32, 0, len(bad))
	for _, p := range bad {
		slots = append(slots, uint32(p.Slot()))
	}
	slices.Sort(slots)
	return slices.Compact(slots)
}
