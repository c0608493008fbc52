package gc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Bristol Fashion (https://nigelsmart.github.io/MPC-Circuits/) is a text format:
//
//	nGates nWires
//	nInputValues width...
//	nOutputValues width...
//
//	nIn nOut in... out... OP        one gate per line, OP ∈ XOR AND INV EQW EQ MAND
//
// Input values occupy the first wires in order, output values the last sum(widths) wires.
// "1 1 v w EQ" sets wire w to the constant bit v. MAND with 2m inputs and m outputs is m
// ANDs (in[i] ∧ in[m+i] → out[i]); ReadBristol expands it, so nGates counts MAND lines, not
// the ANDs they hold.

// Limits on what ReadBristol accepts, so a hostile file cannot make it allocate more than a
// constant times its own length.
const (
	maxBristolValues = 1 << 20 // input or output values per circuit
	// MaxBristolIOBits bounds the total width of the inputs and of the outputs: a header may
	// declare wires no gate touches, so the file's length alone does not bound them.
	MaxBristolIOBits = 1 << 24
)

// ReadBristol parses a Bristol Fashion circuit and validates it (Circuit.Validate). It never
// panics on bad input and allocates memory proportional to the input's length, not to the
// counts its header claims: every error wraps ErrInvalidCircuit (or is r's read error).
func ReadBristol(r io.Reader) (*Circuit, error) {
	tr := &tokenReader{s: bufio.NewScanner(r)}
	tr.s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	tr.s.Split(bufio.ScanWords)

	nGates, err := tr.int(1<<40, "gate count")
	if err != nil {
		return nil, err
	}
	nWires, err := tr.int(MaxWires, "wire count")
	if err != nil {
		return nil, err
	}
	c := &Circuit{Wires: nWires}
	if c.Inputs, err = tr.widths("input"); err != nil {
		return nil, err
	}
	if c.Outputs, err = tr.widths("output"); err != nil {
		return nil, err
	}
	nIn, nOut := c.NumInputWires(), c.NumOutputWires()
	if nIn > MaxBristolIOBits || nOut > MaxBristolIOBits {
		return nil, invalid("bristol: inputs (%d bits) or outputs (%d bits) exceed %d bits", nIn, nOut, MaxBristolIOBits)
	}
	if nIn > nWires || nOut > nWires {
		return nil, invalid("bristol: inputs (%d bits) or outputs (%d bits) exceed %d wires", nIn, nOut, nWires)
	}
	var ins, outs []uint32
	for i := 0; i < nGates; i++ {
		nin, err := tr.int(1<<20, "gate input count")
		if err != nil {
			return nil, gateErr(i, err)
		}
		nout, err := tr.int(1<<20, "gate output count")
		if err != nil {
			return nil, gateErr(i, err)
		}
		ins, outs = ins[:0], outs[:0]
		for range nin {
			w, err := tr.int(MaxWires, "wire")
			if err != nil {
				return nil, gateErr(i, err)
			}
			ins = append(ins, uint32(w))
		}
		for range nout {
			w, err := tr.int(MaxWires, "wire")
			if err != nil {
				return nil, gateErr(i, err)
			}
			outs = append(outs, uint32(w))
		}
		op, err := tr.word("gate op")
		if err != nil {
			return nil, gateErr(i, err)
		}
		var gs []Gate
		switch {
		case op == "XOR" && nin == 2 && nout == 1:
			gs = []Gate{{A: ins[0], B: ins[1], Out: outs[0], Op: XOR}}
		case op == "AND" && nin == 2 && nout == 1:
			gs = []Gate{{A: ins[0], B: ins[1], Out: outs[0], Op: AND}}
		case op == "INV" && nin == 1 && nout == 1:
			gs = []Gate{{A: ins[0], Out: outs[0], Op: INV}}
		case op == "EQW" && nin == 1 && nout == 1:
			gs = []Gate{{A: ins[0], Out: outs[0], Op: EQW}}
		case op == "EQ" && nin == 1 && nout == 1:
			gs = []Gate{{A: ins[0], Out: outs[0], Op: EQ}}
		case op == "MAND" && nout > 0 && nin == 2*nout:
			gs = make([]Gate, nout)
			for k := range nout {
				gs[k] = Gate{A: ins[k], B: ins[nout+k], Out: outs[k], Op: AND}
			}
		default:
			return nil, invalid("bristol: gate %d: %q with %d inputs and %d outputs", i, op, nin, nout)
		}
		c.Gates = append(c.Gates, gs...)
	}
	if w, err := tr.word("end of file"); err == nil {
		return nil, invalid("bristol: trailing %q after %d gates", w, nGates)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	// Every wire is an input or a gate's output, so a header claiming more wires than that
	// is wrong; checking it first bounds Validate's bitset by the file's length.
	if nWires > nIn+len(c.Gates) {
		return nil, invalid("bristol: %d wires but only %d inputs and %d gate outputs", nWires, nIn, len(c.Gates))
	}
	c.OutputWires = make([]uint32, nOut)
	for j := range c.OutputWires {
		c.OutputWires[j] = uint32(nWires - nOut + j)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func gateErr(i int, err error) error {
	if errors.Is(err, io.EOF) {
		return invalid("bristol: gate %d: unexpected end of file", i)
	}
	return fmt.Errorf("bristol: gate %d: %w", i, err)
}

type tokenReader struct{ s *bufio.Scanner }

func (t *tokenReader) word(what string) (string, error) {
	if !t.s.Scan() {
		if err := t.s.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return "", invalid("bristol: %s: token too long", what)
			}
			return "", fmt.Errorf("bristol: read %s: %w", what, err)
		}
		return "", io.EOF
	}
	return t.s.Text(), nil
}

func (t *tokenReader) int(max int, what string) (int, error) {
	w, err := t.word(what)
	if errors.Is(err, io.EOF) {
		return 0, invalid("bristol: unexpected end of file reading %s", what)
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(w, 10, 63)
	if err != nil || n > uint64(max) {
		return 0, invalid("bristol: %s %q is not an integer in [0, %d]", what, w, max)
	}
	return int(n), nil
}

func (t *tokenReader) widths(what string) ([]int, error) {
	n, err := t.int(maxBristolValues, what+" value count")
	if err != nil {
		return nil, err
	}
	ws := make([]int, 0, min(n, 1024))
	for range n {
		w, err := t.int(MaxWires, what+" width")
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// WriteBristol writes c in Bristol Fashion. The format places outputs on the last wires, so
// circuits whose OutputWires are elsewhere (a Builder's) are rejected; MAND is not used.
func WriteBristol(w io.Writer, c *Circuit) error {
	if err := c.Validate(); err != nil {
		return err
	}
	nOut := len(c.OutputWires)
	for j, ow := range c.OutputWires {
		if int(ow) != c.Wires-nOut+j {
			return fmt.Errorf("gc: bristol needs outputs on the last %d wires, output %d is wire %d", nOut, j, ow)
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d %d\n%d", len(c.Gates), c.Wires, len(c.Inputs))
	for _, x := range c.Inputs {
		fmt.Fprintf(bw, " %d", x)
	}
	fmt.Fprintf(bw, "\n%d", len(c.Outputs))
	for _, x := range c.Outputs {
		fmt.Fprintf(bw, " %d", x)
	}
	bw.WriteString("\n\n")
	for _, g := range c.Gates {
		switch g.Op.arity() {
		case 2:
			fmt.Fprintf(bw, "2 1 %d %d %d %v\n", g.A, g.B, g.Out, g.Op)
		default:
			fmt.Fprintf(bw, "1 1 %d %d %v\n", g.A, g.Out, g.Op)
		}
	}
	return bw.Flush()
}
