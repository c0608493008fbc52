package gc

import (
	"errors"
	"fmt"
)

// Op is a gate operation. XOR, INV, EQW and EQ are free to garble (free-XOR); AND costs
// two ciphertexts (half-gates). OR and other non-linear gates are written with these (the
// Builder's OR is a⊕b⊕ab).
type Op uint8

const (
	// XOR sets Out = A ⊕ B.
	XOR Op = iota
	// AND sets Out = A ∧ B.
	AND
	// INV sets Out = ¬A (B is unused and must be zero).
	INV
	// EQW copies wire A to Out (Bristol Fashion "EQW"; B is unused and must be zero).
	EQW
	// EQ sets Out to the constant bit A, which must be 0 or 1 (Bristol Fashion "EQ"; A is a
	// value, not a wire; B is unused and must be zero).
	EQ
	numOps
)

var opNames = [numOps]string{XOR: "XOR", AND: "AND", INV: "INV", EQW: "EQW", EQ: "EQ"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// arity is the number of wire inputs the gate reads (EQ reads none: A is a constant).
func (o Op) arity() int {
	switch o {
	case XOR, AND:
		return 2
	case INV, EQW:
		return 1
	}
	return 0
}

// Gate is one gate. A and B are input wires (see Op for the unary and constant gates), Out
// the wire it defines.
type Gate struct {
	A, B, Out uint32
	Op        Op
}

// MaxWires bounds Circuit.Wires. Two label slots above the circuit's wires are reserved by
// the engine (a constant-zero and a constant-one slot), and wire indices are uint32.
const MaxWires = 1<<32 - 4

// Circuit is a boolean circuit in the Bristol Fashion shape: the input wires come first,
// numbered consecutively from 0 (input value i occupies Inputs[i] wires after those of values
// 0..i-1), and gates are listed in an order where every gate's inputs are defined before it
// (input wires or outputs of earlier gates). A wire may be defined only once (single
// assignment), which the Bristol files and the Builder both give; it lets the engine reorder
// gates into layers of independent ANDs (plan.go).
//
// Bit order: within a value, wire i carries bit i of the value as the caller defines it; the
// engine does not interpret values. The Bristol Fashion crypto circuits have their own
// conventions (see kat_test.go for AES-128 and SHA-256).
type Circuit struct {
	// Wires is the number of wires; every index in the circuit is below it.
	Wires int
	// Inputs holds the bit width of each input value.
	Inputs []int
	// Outputs holds the bit width of each output value.
	Outputs []int
	// OutputWires lists the wires of the outputs, value after value, sum(Outputs) of them.
	// Bristol Fashion places them on the last wires; the Builder may put them anywhere.
	OutputWires []uint32
	// Gates in topological order.
	Gates []Gate
}

// ErrInvalidCircuit is wrapped by every error of Validate and ReadBristol.
var ErrInvalidCircuit = errors.New("gc: invalid circuit")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCircuit, fmt.Sprintf(format, a...))
}

// NumInputWires is the total width of the inputs.
func (c *Circuit) NumInputWires() int { return sum(c.Inputs) }

// NumOutputWires is the total width of the outputs.
func (c *Circuit) NumOutputWires() int { return sum(c.Outputs) }

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// Counts returns the number of AND gates (two ciphertexts each) and of free gates (XOR,
// INV, EQW, EQ).
func (c *Circuit) Counts() (and, free int) {
	for _, g := range c.Gates {
		if g.Op == AND {
			and++
		}
	}
	return and, len(c.Gates) - and
}

// ANDCount is the number of AND gates: the garbled size of the gate tables is 32 B each.
func (c *Circuit) ANDCount() int { a, _ := c.Counts(); return a }

// XORCount is the number of XOR gates (INV, EQW and EQ not included).
func (c *Circuit) XORCount() int {
	n := 0
	for _, g := range c.Gates {
		if g.Op == XOR {
			n++
		}
	}
	return n
}

// Validate checks the circuit's shape: widths are positive and add up, every index is in
// range, every gate reads only wires defined before it (topological order), no wire is
// defined twice, and every output wire is defined. The engine never garbles a circuit that
// fails it.
func (c *Circuit) Validate() error {
	if err := c.validateShape(); err != nil {
		return err
	}
	nIn := c.NumInputWires()
	defined := newBitset(c.Wires)
	for w := range nIn {
		defined.set(uint32(w))
	}
	for i, g := range c.Gates {
		if err := checkGate(g, c.Wires, defined); err != nil {
			return invalid("gate %d (%v): %v", i, g.Op, err)
		}
		defined.set(g.Out)
	}
	for j, w := range c.OutputWires {
		if !defined.has(w) {
			return invalid("output wire %d (wire %d) is not defined", j, w)
		}
	}
	return nil
}

// validateShape checks everything but the gates: widths, counts and ranges.
func (c *Circuit) validateShape() error {
	if c.Wires < 0 || c.Wires > MaxWires {
		return invalid("%d wires (at most %d)", c.Wires, MaxWires)
	}
	nIn, nOut := 0, 0
	for i, w := range c.Inputs {
		if w <= 0 {
			return invalid("input %d has width %d", i, w)
		}
		if nIn += w; nIn > c.Wires {
			return invalid("inputs need %d+ wires, circuit has %d", nIn, c.Wires)
		}
	}
	for i, w := range c.Outputs {
		if w <= 0 {
			return invalid("output %d has width %d", i, w)
		}
		if nOut += w; nOut > len(c.OutputWires) {
			break
		}
	}
	if nOut != len(c.OutputWires) {
		return invalid("outputs are %d bits wide but %d output wires are listed", nOut, len(c.OutputWires))
	}
	for j, w := range c.OutputWires {
		if uint64(w) >= uint64(c.Wires) {
			return invalid("output wire %d (wire %d) out of range", j, w)
		}
	}
	return nil
}

// checkGate checks one gate against the wires defined so far.
func checkGate(g Gate, wires int, defined bitset) error {
	if g.Op >= numOps {
		return fmt.Errorf("unknown op %d", uint8(g.Op))
	}
	if uint64(g.Out) >= uint64(wires) {
		return fmt.Errorf("output wire %d out of range", g.Out)
	}
	if defined.has(g.Out) {
		return fmt.Errorf("wire %d defined twice", g.Out)
	}
	switch g.Op.arity() {
	case 2:
		if uint64(g.A) >= uint64(wires) || uint64(g.B) >= uint64(wires) {
			return fmt.Errorf("input wire out of range")
		}
		if !defined.has(g.A) || !defined.has(g.B) {
			return fmt.Errorf("input wire used before it is defined")
		}
	case 1:
		if uint64(g.A) >= uint64(wires) || g.B != 0 {
			return fmt.Errorf("input wire out of range")
		}
		if !defined.has(g.A) {
			return fmt.Errorf("input wire used before it is defined")
		}
	case 0:
		if g.A > 1 || g.B != 0 {
			return fmt.Errorf("constant %d is not a bit", g.A)
		}
	}
	return nil
}

// Eval evaluates the circuit in the clear: in holds NumInputWires bits (input values one
// after another, bit i of a value on its i-th wire), the result NumOutputWires bits. It is
// the reference the garbled evaluation is tested against.
func (c *Circuit) Eval(in []bool) ([]bool, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(in) != c.NumInputWires() {
		return nil, fmt.Errorf("gc: eval with %d input bits, circuit takes %d", len(in), c.NumInputWires())
	}
	v := make([]bool, c.Wires)
	copy(v, in)
	for _, g := range c.Gates {
		switch g.Op {
		case XOR:
			v[g.Out] = v[g.A] != v[g.B]
		case AND:
			v[g.Out] = v[g.A] && v[g.B]
		case INV:
			v[g.Out] = !v[g.A]
		case EQW:
			v[g.Out] = v[g.A]
		case EQ:
			v[g.Out] = g.A == 1
		}
	}
	out := make([]bool, len(c.OutputWires))
	for j, w := range c.OutputWires {
		out[j] = v[w]
	}
	return out, nil
}

// Hash is SHA-256 over the canonical binary encoding of the circuit (spec D10: Broker and
// Garbler must agree on it; the stream header carries it):
//
//	"obscura/gc/circuit/v1" ‖ LE64(Wires) ‖ LE64(len Inputs) ‖ LE64 each width ‖
//	LE64(len Outputs) ‖ LE64 each width ‖ LE32 each output wire ‖
//	for each gate: op (1 byte) ‖ LE32(A) ‖ LE32(B) ‖ LE32(Out) ‖ LE64(len Gates)
//
// The gate count comes last so that a GateSource can be hashed in one streaming pass.
//
// It costs one pass over the gates (about 0.3 ms for the SHA-256 circuit), so Compile
// computes it once per circuit, not per execution.
func (c *Circuit) Hash() [32]byte {
	ch := newCircuitHasher(c.Wires, c.Inputs, c.Outputs, c.OutputWires)
	for _, g := range c.Gates {
		ch.gate(g)
	}
	return ch.sum()
}

type bitset []uint64

func newBitset(n int) bitset       { return make(bitset, (n+63)/64) }
func (s bitset) set(i uint32)      { s[i/64] |= 1 << (i % 64) }
func (s bitset) has(i uint32) bool { return s[i/64]&(1<<(i%64)) != 0 }
