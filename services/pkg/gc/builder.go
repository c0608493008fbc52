package gc

import "fmt"

// Wire is a wire handle of a Builder.
type Wire uint32

// Builder builds a Circuit programmatically, for compilers such as the PPS DSL. Inputs may
// be declared at any point: Circuit renumbers the wires so that inputs come first, in the
// order they were declared, as Circuit requires. Every gate gets a fresh wire, so the result
// is in single assignment and topological order by construction. The builder does not
// optimise; the engine folds constants and copies when it compiles a circuit (Compile).
//
// A Builder is not safe for concurrent use. Wires from another Builder are a programming
// error reported by Circuit.
type Builder struct {
	nodes   []node // one per wire handle
	inputs  []int
	outputs []int
	outWire []Wire
	consts  [2]Wire
	haveC   [2]bool
	err     error
}

// node records what defines a wire handle: an input bit (op = numOps) or a gate.
type node struct {
	a, b Wire
	op   Op
}

const inputNode = numOps

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{} }

func (b *Builder) wire(n node) Wire {
	b.nodes = append(b.nodes, n)
	return Wire(len(b.nodes) - 1)
}

func (b *Builder) check(ws ...Wire) {
	for _, w := range ws {
		if int(w) >= len(b.nodes) && b.err == nil {
			b.err = fmt.Errorf("gc: builder: wire %d does not belong to this builder", w)
		}
	}
}

// Input declares an input value of width bits and returns its wires, least significant
// (bit 0) first.
func (b *Builder) Input(width int) []Wire {
	if width <= 0 && b.err == nil {
		b.err = fmt.Errorf("gc: builder: input of width %d", width)
	}
	ws := make([]Wire, max(width, 0))
	for i := range ws {
		ws[i] = b.wire(node{op: inputNode})
	}
	b.inputs = append(b.inputs, max(width, 0))
	return ws
}

// XOR returns x ⊕ y (free).
func (b *Builder) XOR(x, y Wire) Wire { b.check(x, y); return b.wire(node{x, y, XOR}) }

// AND returns x ∧ y (one AND gate, 32 garbled bytes).
func (b *Builder) AND(x, y Wire) Wire { b.check(x, y); return b.wire(node{x, y, AND}) }

// NOT returns ¬x (free).
func (b *Builder) NOT(x Wire) Wire { b.check(x); return b.wire(node{a: x, op: INV}) }

// OR returns x ∨ y as x ⊕ y ⊕ (x ∧ y): one AND gate (spec §3.6).
func (b *Builder) OR(x, y Wire) Wire { return b.XOR(b.XOR(x, y), b.AND(x, y)) }

// MUX returns s ? y : x as x ⊕ (s ∧ (x ⊕ y)): one AND gate.
func (b *Builder) MUX(s, x, y Wire) Wire { return b.XOR(x, b.AND(s, b.XOR(x, y))) }

// Const returns a wire carrying the constant bit (free; one wire per value is shared).
func (b *Builder) Const(bit bool) Wire {
	i := 0
	if bit {
		i = 1
	}
	if !b.haveC[i] {
		b.consts[i] = b.wire(node{a: Wire(i), op: EQ})
		b.haveC[i] = true
	}
	return b.consts[i]
}

// Output declares an output value made of ws, least significant first.
func (b *Builder) Output(ws ...Wire) {
	b.check(ws...)
	if len(ws) == 0 && b.err == nil {
		b.err = fmt.Errorf("gc: builder: empty output")
	}
	b.outputs = append(b.outputs, len(ws))
	b.outWire = append(b.outWire, ws...)
}

// Circuit returns the circuit built so far, renumbered with the inputs first. The Builder
// may be used further; later calls return larger circuits.
func (b *Builder) Circuit() (*Circuit, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.nodes) > MaxWires {
		return nil, fmt.Errorf("gc: builder: %d wires (at most %d)", len(b.nodes), MaxWires)
	}
	id := make([]uint32, len(b.nodes))
	next := uint32(0)
	for i, n := range b.nodes {
		if n.op == inputNode {
			id[i] = next
			next++
		}
	}
	c := &Circuit{
		Wires:   len(b.nodes),
		Inputs:  append([]int(nil), b.inputs...),
		Outputs: append([]int(nil), b.outputs...),
		Gates:   make([]Gate, 0, len(b.nodes)-int(next)),
	}
	for i, n := range b.nodes {
		if n.op == inputNode {
			continue
		}
		id[i] = next
		next++
		g := Gate{Out: id[i], Op: n.op}
		switch n.op.arity() {
		case 2:
			g.A, g.B = id[n.a], id[n.b]
		case 1:
			g.A = id[n.a]
		case 0:
			g.A = uint32(n.a)
		}
		c.Gates = append(c.Gates, g)
	}
	c.OutputWires = make([]uint32, len(b.outWire))
	for j, w := range b.outWire {
		c.OutputWires[j] = id[w]
	}
	return c, c.Validate()
}
