package gc

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"iter"
	"math"
	"sync"
)

// GateSource is a circuit whose gates can be produced in order, any number of times. A
// *Circuit is one; a generator that makes gates on the fly lets circuits larger than memory
// be garbled and evaluated in a stream (spec §10 #14). Unlike a Circuit, a GateSource may
// define a wire again after its last use, so a generator can work in a bounded wire space;
// every read must still come after a definition.
type GateSource interface {
	// Shape returns the circuit's wire count, input and output widths and output wires.
	Shape() (wires int, inputs, outputs []int, outputWires []uint32)
	// GateChunks yields the gates in order, in chunks of any size; a chunk is only read during
	// the yield, so a generator may reuse its buffer. Every iteration must yield the same
	// gates.
	GateChunks() iter.Seq[[]Gate]
}

// Shape implements GateSource.
func (c *Circuit) Shape() (int, []int, []int, []uint32) {
	return c.Wires, c.Inputs, c.Outputs, c.OutputWires
}

// GateChunks implements GateSource: the gates in chunks of 4096.
func (c *Circuit) GateChunks() iter.Seq[[]Gate] {
	return func(yield func([]Gate) bool) {
		for i := 0; i < len(c.Gates); i += 4096 {
			if !yield(c.Gates[i:min(i+4096, len(c.Gates))]) {
				return
			}
		}
	}
}

// Plan is a circuit prepared for garbling and evaluation, computed once per circuit and
// shared by every execution (it is read-only, safe for concurrent use). Compiling a Circuit
// folds constants and copies, renames wires into label slots and schedules the gates in
// layers — the free gates of AND-depth d, then the ANDs of depth d+1, which are independent
// of each other — so the AND kernels hash many gates in flight. A GateSource that is not a
// Circuit is not held in memory: each execution walks it again and batches consecutive
// independent ANDs in the order given.
//
// The Garbler and the evaluator must compile the same circuit; the stream header carries
// Hash and both sides check it.
type Plan struct {
	hash              [32]byte
	nIn, nOut, nAND   int
	inputs, outputs   []int
	slots             int // label slots, including zeroSlot and oneSlot
	zeroSlot, oneSlot uint32
	outSlots          []uint32
	ops               []uint32 // compiled: triples (a, b, out) in schedule order
	runs              []run    // compiled: how ops splits into XOR and AND runs
	src               GateSource
	srcWires          int
	nXOR              int
	pool              sync.Pool // *[]Label of slots entries, erased before reuse
}

// run is n consecutive triples of one kind in Plan.ops.
type run struct {
	and bool
	n   int
}

// Hash is the circuit hash (Circuit.Hash of the compiled circuit).
func (p *Plan) Hash() [32]byte { return p.hash }

// ANDCount is the number of AND gates garbled (after constant folding), 32 bytes each.
func (p *Plan) ANDCount() int { return p.nAND }

// NumInputWires and NumOutputWires are the circuit's input and output widths in bits.
func (p *Plan) NumInputWires() int  { return p.nIn }
func (p *Plan) NumOutputWires() int { return p.nOut }

// Inputs and Outputs return copies of the circuit's value widths.
func (p *Plan) Inputs() []int  { return append([]int(nil), p.inputs...) }
func (p *Plan) Outputs() []int { return append([]int(nil), p.outputs...) }

// Compile validates src and prepares it. A *Circuit is compiled in full (see Plan); any
// other GateSource is walked once here to validate it and compute its hash, and again by
// every Garble and Evaluate.
func Compile(src GateSource) (*Plan, error) {
	if c, ok := src.(*Circuit); ok {
		return compileCircuit(c)
	}
	return compileSource(src)
}

// circuitHasher computes Circuit.Hash in one streaming pass.
type circuitHasher struct {
	h   hash.Hash
	buf []byte
	n   uint64
}

func newCircuitHasher(wires int, inputs, outputs []int, outputWires []uint32) *circuitHasher {
	ch := &circuitHasher{h: sha256.New(), buf: make([]byte, 0, 8192)}
	ch.buf = append(ch.buf, "obscura/gc/circuit/v1"...)
	ch.buf = binary.LittleEndian.AppendUint64(ch.buf, uint64(wires))
	for _, ws := range [][]int{inputs, outputs} {
		ch.buf = binary.LittleEndian.AppendUint64(ch.buf, uint64(len(ws)))
		for _, w := range ws {
			ch.flush(8)
			ch.buf = binary.LittleEndian.AppendUint64(ch.buf, uint64(w))
		}
	}
	for _, w := range outputWires {
		ch.flush(4)
		ch.buf = binary.LittleEndian.AppendUint32(ch.buf, w)
	}
	return ch
}

func (ch *circuitHasher) flush(room int) {
	if len(ch.buf)+room > cap(ch.buf) {
		ch.h.Write(ch.buf)
		ch.buf = ch.buf[:0]
	}
}

func (ch *circuitHasher) gate(g Gate) {
	ch.flush(13)
	ch.buf = append(ch.buf, byte(g.Op))
	ch.buf = binary.LittleEndian.AppendUint32(ch.buf, g.A)
	ch.buf = binary.LittleEndian.AppendUint32(ch.buf, g.B)
	ch.buf = binary.LittleEndian.AppendUint32(ch.buf, g.Out)
	ch.n++
}

func (ch *circuitHasher) sum() (out [32]byte) {
	ch.flush(8)
	ch.buf = binary.LittleEndian.AppendUint64(ch.buf, ch.n)
	ch.h.Write(ch.buf)
	ch.h.Sum(out[:0])
	return out
}

// val is what a circuit wire folds to while compiling: a label slot, or a constant.
type val struct {
	slot  uint32
	kind  uint8 // valSlot, valZero, valOne
	depth uint32
}

const (
	valSlot = iota
	valZero
	valOne
)

func compileCircuit(c *Circuit) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{
		hash:    c.Hash(),
		nIn:     c.NumInputWires(),
		nOut:    c.NumOutputWires(),
		inputs:  append([]int(nil), c.Inputs...),
		outputs: append([]int(nil), c.Outputs...),
	}
	vals := make([]val, c.Wires)
	for w := range p.nIn {
		vals[w] = val{slot: uint32(w)}
	}
	// First pass: fold, and collect the remaining gates with temporary slots numbered
	// after the inputs, each with its AND-depth.
	type tgate struct {
		a, b  uint32
		and   bool
		depth uint32
	}
	var gates []tgate
	next := uint32(p.nIn)
	const tmpZero, tmpOne = ^uint32(0) - 1, ^uint32(0)
	newSlot := func(a, b uint32, and bool, da, db uint32) val {
		d := max(da, db)
		if and {
			d++
		}
		gates = append(gates, tgate{a, b, and, d})
		next++
		return val{slot: next - 1, depth: d}
	}
	maxDepth := uint32(0)
	for _, g := range c.Gates {
		var v val
		switch g.Op {
		case EQ:
			v.kind = valZero + uint8(g.A)
		case EQW:
			v = vals[g.A]
		case INV:
			a := vals[g.A]
			switch a.kind {
			case valZero:
				v.kind = valOne
			case valOne:
				v.kind = valZero
			default:
				v = newSlot(a.slot, tmpOne, false, a.depth, 0)
			}
		case XOR:
			a, b := vals[g.A], vals[g.B]
			switch {
			case a.kind != valSlot && b.kind != valSlot:
				v.kind = valZero + ((a.kind - valZero) ^ (b.kind - valZero))
			case a.kind == valZero:
				v = b
			case b.kind == valZero:
				v = a
			case a.kind == valOne:
				v = newSlot(b.slot, tmpOne, false, b.depth, 0)
			case b.kind == valOne:
				v = newSlot(a.slot, tmpOne, false, a.depth, 0)
			case a.slot == b.slot:
				v.kind = valZero
			default:
				v = newSlot(a.slot, b.slot, false, a.depth, b.depth)
			}
		case AND:
			a, b := vals[g.A], vals[g.B]
			switch {
			case a.kind == valZero || b.kind == valZero:
				v.kind = valZero
			case a.kind == valOne:
				v = b
			case b.kind == valOne:
				v = a
			case a.slot == b.slot:
				v = a
			default:
				v = newSlot(a.slot, b.slot, true, a.depth, b.depth)
			}
		}
		maxDepth = max(maxDepth, v.depth)
		vals[g.Out] = v
	}
	// Dead gates — whose output reaches no output wire — are dropped: nothing of theirs is
	// ever decoded, so garbling them would only send tables (a DSL program's unused
	// definition, e.g. the Table 2 rank-free program's combined count: 71k of its 153k ANDs).
	live := make([]bool, len(gates))
	for _, w := range c.OutputWires {
		if v := vals[w]; v.kind == valSlot && v.slot >= uint32(p.nIn) {
			live[v.slot-uint32(p.nIn)] = true
		}
	}
	for i := len(gates) - 1; i >= 0; i-- {
		if !live[i] {
			continue
		}
		for _, s := range [2]uint32{gates[i].a, gates[i].b} {
			if s >= uint32(p.nIn) && s < tmpZero {
				live[s-uint32(p.nIn)] = true
			}
		}
	}
	// Second pass: schedule by depth — free gates of depth d (in circuit order, which is
	// topological among them), then the ANDs of depth d+1, which are independent.
	xorAt := make([][]uint32, maxDepth+1) // gate indices
	andAt := make([][]uint32, maxDepth+1)
	for i, g := range gates {
		if !live[i] {
			continue
		}
		if g.and {
			andAt[g.depth] = append(andAt[g.depth], uint32(i))
		} else {
			xorAt[g.depth] = append(xorAt[g.depth], uint32(i))
		}
	}
	order := make([]uint32, 0, len(gates))
	for d := range maxDepth + 1 {
		if d > 0 && len(andAt[d]) > 0 {
			order = append(order, andAt[d]...)
			p.runs = append(p.runs, run{and: true, n: len(andAt[d])})
			p.nAND += len(andAt[d])
		}
		if len(xorAt[d]) > 0 {
			order = append(order, xorAt[d]...)
			p.runs = append(p.runs, run{and: false, n: len(xorAt[d])})
			p.nXOR += len(xorAt[d])
		}
	}
	// Third pass: allocate label slots by liveness. A temporary wire's slot is released
	// after its last read and reused, most recently released first, so the label array
	// holds the circuit's largest live set rather than one slot per gate: a smaller working
	// set for the kernels' scattered reads, and less to erase per execution. Input slots stay
	// where Garble and Evaluate put the inputs (0..nIn-1) and are not reused; output wires
	// are never released. The AND kernels store a gate's output before loading a later
	// gate's inputs in the same batch, so slots released in an AND run are reused only after
	// the run; XOR runs go gate by gate in order, so their releases are reusable at once.
	const unread, never = -1, math.MaxInt32
	lastUse := make([]int32, len(gates)) // schedule position of the last read
	for t := range lastUse {
		lastUse[t] = unread
	}
	for k, i := range order {
		for _, s := range [2]uint32{gates[i].a, gates[i].b} {
			if s >= uint32(p.nIn) && s < tmpZero {
				lastUse[s-uint32(p.nIn)] = int32(k) // positions increase: the last write wins
			}
		}
	}
	for _, w := range c.OutputWires {
		if v := vals[w]; v.kind == valSlot && v.slot >= uint32(p.nIn) {
			lastUse[v.slot-uint32(p.nIn)] = never
		}
	}
	rename := make([]uint32, len(gates))
	ren := func(s uint32) uint32 {
		if s < uint32(p.nIn) || s >= tmpZero {
			return s // an input, or tmpZero/tmpOne until the constant slots are placed
		}
		return rename[s-uint32(p.nIn)]
	}
	var free, pending []uint32
	next = uint32(p.nIn)
	p.ops = make([]uint32, 0, 3*len(order))
	k := 0
	for _, r := range p.runs {
		release := func(slot uint32) {
			if r.and {
				pending = append(pending, slot)
			} else {
				free = append(free, slot)
			}
		}
		for _, i := range order[k : k+r.n] {
			g := gates[i]
			var out uint32
			if n := len(free); n > 0 {
				out, free = free[n-1], free[:n-1]
			} else {
				out, next = next, next+1
			}
			rename[i] = out
			p.ops = append(p.ops, ren(g.a), ren(g.b), out)
			for _, s := range [2]uint32{g.a, g.b} {
				if s >= uint32(p.nIn) && s < tmpZero && lastUse[s-uint32(p.nIn)] == int32(k) {
					release(rename[s-uint32(p.nIn)])
				}
			}
			if lastUse[i] == unread {
				release(out) // never read
			}
			k++
		}
		free = append(free, pending...)
		pending = pending[:0]
	}
	p.slots = int(next) + 2
	p.zeroSlot, p.oneSlot = next, next+1
	for j, s := range p.ops {
		switch s {
		case tmpZero:
			p.ops[j] = p.zeroSlot
		case tmpOne:
			p.ops[j] = p.oneSlot
		}
	}
	slotOf := func(s uint32) uint32 {
		switch s {
		case tmpZero:
			return p.zeroSlot
		case tmpOne:
			return p.oneSlot
		}
		return ren(s)
	}
	p.outSlots = make([]uint32, p.nOut)
	for j, w := range c.OutputWires {
		switch v := vals[w]; v.kind {
		case valZero:
			p.outSlots[j] = p.zeroSlot
		case valOne:
			p.outSlots[j] = p.oneSlot
		default:
			p.outSlots[j] = slotOf(v.slot)
		}
	}
	return p, nil
}

// compileSource validates a GateSource in one pass (in range, defined before read) and
// hashes it. It keeps one bit per wire.
func compileSource(src GateSource) (*Plan, error) {
	wires, inputs, outputs, outputWires := src.Shape()
	c := &Circuit{Wires: wires, Inputs: inputs, Outputs: outputs, OutputWires: outputWires}
	if err := c.validateShape(); err != nil {
		return nil, err
	}
	p := &Plan{
		nIn:      c.NumInputWires(),
		nOut:     c.NumOutputWires(),
		inputs:   append([]int(nil), inputs...),
		outputs:  append([]int(nil), outputs...),
		src:      src,
		srcWires: wires,
		slots:    wires + 2,
		zeroSlot: uint32(wires),
		oneSlot:  uint32(wires + 1),
	}
	ch := newCircuitHasher(wires, inputs, outputs, outputWires)
	defined := newBitset(wires)
	for w := range p.nIn {
		defined.set(uint32(w))
	}
	var err error
	i := 0
	for chunk := range src.GateChunks() {
		for _, g := range chunk {
			if g.Op >= numOps || uint64(g.Out) >= uint64(wires) {
				err = invalid("gate %d: bad op or output wire", i)
				break
			}
			ok := true
			switch g.Op.arity() {
			case 2:
				ok = uint64(g.A) < uint64(wires) && uint64(g.B) < uint64(wires) && defined.has(g.A) && defined.has(g.B)
			case 1:
				ok = uint64(g.A) < uint64(wires) && g.B == 0 && defined.has(g.A)
			case 0:
				ok = g.A <= 1 && g.B == 0
			}
			if !ok {
				err = invalid("gate %d (%v): input out of range or not defined", i, g.Op)
				break
			}
			defined.set(g.Out)
			ch.gate(g)
			if g.Op == AND {
				p.nAND++
			} else {
				p.nXOR++
			}
			i++
		}
		if err != nil {
			return nil, err
		}
	}
	for j, w := range outputWires {
		if !defined.has(w) {
			return nil, invalid("output wire %d (wire %d) is not defined", j, w)
		}
	}
	p.hash = ch.sum()
	p.outSlots = append([]uint32(nil), outputWires...)
	return p, nil
}

// forEachRun calls fn with consecutive runs of ops in schedule order. For a compiled
// circuit they are the Plan's own; for a GateSource they are translated chunk by chunk
// into buf-backed triples: INV a → a ⊕ one, EQW a → a ⊕ zero, EQ v → zero ⊕ (zero or one),
// and a run of ANDs is cut where an AND reads a wire an earlier AND of the run writes.
func (p *Plan) forEachRun(fn func(and bool, ops []uint32) error) error {
	if p.src == nil {
		off := 0
		for _, r := range p.runs {
			if err := fn(r.and, p.ops[off:off+3*r.n]); err != nil {
				return err
			}
			off += 3 * r.n
		}
		return nil
	}
	// gen[w] == cur marks wires written by the current AND run.
	gen := make([]uint32, p.srcWires)
	cur := uint32(1)
	buf := make([]uint32, 0, 3*4096)
	and := false
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := fn(and, buf)
		buf = buf[:0]
		if and {
			cur++
			if cur == 0 { // wrapped: clear the marks
				clear(gen)
				cur = 1
			}
		}
		return err
	}
	var err error
	for chunk := range p.src.GateChunks() {
		for _, g := range chunk {
			isAND := g.Op == AND
			if isAND != and || len(buf) == cap(buf) || (isAND && (gen[g.A] == cur || gen[g.B] == cur)) {
				if err = flush(); err != nil {
					return err
				}
				and = isAND
			}
			// The source was validated by Compile, but it is walked again: keep every slot
			// in range whatever it yields now, since the kernels do not check.
			if uint64(g.Out) >= uint64(p.srcWires) || uint64(g.A) >= uint64(p.srcWires) && g.Op != EQ || uint64(g.B) >= uint64(p.srcWires) {
				return fmt.Errorf("gc: gate source changed since Compile: wire out of range")
			}
			switch g.Op {
			case XOR, AND:
				buf = append(buf, g.A, g.B, g.Out)
			case INV:
				buf = append(buf, g.A, p.oneSlot, g.Out)
			case EQW:
				buf = append(buf, g.A, p.zeroSlot, g.Out)
			case EQ:
				c := p.zeroSlot
				if g.A == 1 {
					c = p.oneSlot
				}
				buf = append(buf, p.zeroSlot, c, g.Out)
			default:
				return fmt.Errorf("gc: gate source changed since Compile: op %d", g.Op)
			}
			if isAND {
				gen[g.Out] = cur
			}
		}
	}
	return flush()
}
