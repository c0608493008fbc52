package dsl

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// OutputKind is the type of one output of a function.
type OutputKind uint8

const (
	// FixedOutput is a 32-bit Q24.8 value.
	FixedOutput OutputKind = iota
	// BitOutput is one bit (a comparison).
	BitOutput
)

// Width is the number of output bits of the kind.
func (k OutputKind) Width() int {
	if k == BitOutput {
		return 1
	}
	return pps.ValueBits
}

// Function is a compiled DSL program (D10): the circuit, its ordered inputs and its output
// schema. Broker and Garbler compile the same source and agree on Circuit.Hash().
type Function struct {
	// ID is the function id: the first 16 bytes, hex, of SHA-256 of the canonical source
	// (spec §5.3).
	ID string
	// Source is the canonical source.
	Source string
	// Layout lists the input slots in circuit order and minInputs.
	Layout pps.InputLayout
	// Outputs is the output schema, in circuit order.
	Outputs []OutputKind
	// Circuit has inputs 32 bits per slot, then one validity bit per slot (pps.InputLayout).
	Circuit *gc.Circuit

	forms []Node
}

// Compile parses and compiles a program. The program runs twice: on the model backend to
// learn its slots and outputs, then on the circuit backend with the inputs declared in
// InputLayout's order. Control flow depends only on compile-time values, so both runs see
// the same slots.
func Compile(src string) (*Function, error) {
	forms, err := Parse(src)
	if err != nil {
		return nil, err
	}
	probe := &interp{be: plain{}}
	out, err := probe.run(forms)
	if err != nil {
		return nil, err
	}
	kinds, err := outputKinds(out)
	if err != nil {
		return nil, err
	}
	if len(probe.slots) == 0 {
		return nil, fmt.Errorf("%w: the function reads no input (val, window or static)", ErrProgram)
	}
	b := gc.NewBuilder()
	be := &circuit{g: newGates(b)}
	for range probe.slots {
		ws := b.Input(pps.ValueBits)
		be.values = append(be.values, ws)
	}
	be.validity = b.Input(len(probe.slots))
	in := &interp{be: be}
	out, err = in.run(forms)
	if err != nil {
		return nil, err
	}
	if len(in.slots) != len(probe.slots) {
		return nil, fmt.Errorf("%w: the program declares %d inputs on one run and %d on another", ErrProgram, len(probe.slots), len(in.slots))
	}
	var flat []value
	flatten(out, &flat)
	for i, v := range flat {
		switch v := v.(type) {
		case *number:
			x := in.num(v).(*word)
			ws := make([]gc.Wire, pps.ValueBits)
			for j := range ws {
				ws[j] = be.g.wire(x[j])
			}
			b.Output(ws...)
		case secretBit:
			b.Output(be.g.wire(v.b.(cbit)))
		case bool:
			b.Output(b.Const(v))
		default:
			return nil, fmt.Errorf("%w: output %d is %s", ErrProgram, i, describe(v))
		}
	}
	c, err := b.Circuit()
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	canon := Canonical(forms)
	sum := sha256.Sum256([]byte(canon))
	return &Function{
		ID:      hex.EncodeToString(sum[:16]),
		Source:  canon,
		Layout:  pps.InputLayout{Slots: probe.slots, MinInputs: max(probe.minInputs, 1)},
		Outputs: kinds,
		Circuit: c,
		forms:   forms,
	}, nil
}

func flatten(v value, out *[]value) {
	if l, ok := v.(list); ok {
		for _, e := range l {
			flatten(e, out)
		}
		return
	}
	*out = append(*out, v)
}

func outputKinds(v value) ([]OutputKind, error) {
	var flat []value
	flatten(v, &flat)
	if len(flat) == 0 {
		return nil, fmt.Errorf("%w: the program's last expression has no output", ErrProgram)
	}
	kinds := make([]OutputKind, len(flat))
	for i, v := range flat {
		switch v.(type) {
		case *number:
			kinds[i] = FixedOutput
		case secretBit, bool:
			kinds[i] = BitOutput
		default:
			return nil, fmt.Errorf("%w: output %d is %s, not a number or a bit", ErrProgram, i, describe(v))
		}
	}
	return kinds, nil
}

// OutputBits is the number of output bits m.
func (f *Function) OutputBits() int {
	n := 0
	for _, k := range f.Outputs {
		n += k.Width()
	}
	return n
}

// Model is the bit-exact plaintext model of the function (spec §10 #1): D1's arithmetic on
// pps.Fixed over the same program. values and valid are per slot, nullified values already
// replaced by their identity (pps.Assignment.ModelInputs). The result is packed like the
// circuit's output: ceil(m/8) bytes, output bits in order, LSB first.
func (f *Function) Model(values []pps.Fixed, valid []bool) ([]byte, error) {
	if len(values) != len(f.Layout.Slots) || len(valid) != len(values) {
		return nil, fmt.Errorf("model of %d slots with %d values and %d validity bits", len(f.Layout.Slots), len(values), len(valid))
	}
	in := &interp{be: plain{values: values, valid: valid}}
	out, err := in.run(f.forms)
	if err != nil {
		return nil, err
	}
	var flat []value
	flatten(out, &flat)
	o := make([]byte, pps.OutputBytes(f.OutputBits()))
	pos := 0
	for _, v := range flat {
		switch v := v.(type) {
		case *number:
			x := uint32(in.num(v).(pps.Fixed))
			for j := range pps.ValueBits {
				o[pos/8] |= byte(x>>j&1) << (pos % 8)
				pos++
			}
		case secretBit:
			if v.b.(bool) {
				o[pos/8] |= 1 << (pos % 8)
			}
			pos++
		case bool:
			if v {
				o[pos/8] |= 1 << (pos % 8)
			}
			pos++
		}
	}
	return o, nil
}

// Decode reads the function's outputs from unmasked output bytes: Q24.8 values, and bits
// as 0 or 1.
func (f *Function) Decode(o []byte) ([]pps.Fixed, error) {
	if len(o) != pps.OutputBytes(f.OutputBits()) {
		return nil, fmt.Errorf("decode %d output bits from %d bytes: %w", f.OutputBits(), len(o), pps.ErrMalformed)
	}
	out := make([]pps.Fixed, len(f.Outputs))
	pos := 0
	for i, k := range f.Outputs {
		var x uint32
		for j := range k.Width() {
			x |= uint32(o[pos/8]>>(pos%8)&1) << j
			pos++
		}
		out[i] = pps.Fixed(int32(x))
	}
	return out, nil
}
