package gc

import (
	"context"
	"fmt"
	"io"
	"unsafe"
)

// Result is what Evaluate learns.
type Result struct {
	Header *Header
	// Masked holds (o⊕r), m bits LSB first (the bits PPS publishes, spec §8.6).
	Masked []byte
}

// Evaluate reads one garbled stream for p from r and evaluates it as it arrives, holding
// one label per wire and one chunk of tables. labels[u] is the label the evaluator received
// for input wire u (a publisher label a_b); entries for wires the stream marks constant are
// ignored. It reads exactly the stream's bytes. A stream that does not parse is an error
// wrapping ErrMalformed (or ErrCircuitMismatch), never a panic.
func Evaluate(ctx context.Context, p *Plan, r io.Reader, labels []Label, opt *Options) (*Result, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	return EvaluateAfterHeader(ctx, p, h, r, labels, opt)
}

// EvaluateAfterHeader is Evaluate for a caller that has read the header with ReadHeader
// (to pick the Plan by h.CircuitHash, say).
func EvaluateAfterHeader(ctx context.Context, p *Plan, h *Header, r io.Reader, labels []Label, opt *Options) (*Result, error) {
	if h.version != 0 && h.version != streamVersion {
		return nil, malformed("version %d: a pregarbled execution's stream (EvaluatePregarbled)", h.version)
	}
	if err := checkCounts(p, h); err != nil {
		return nil, err
	}
	if len(labels) != p.nIn {
		return nil, fmt.Errorf("gc: evaluate with %d input labels, circuit has %d input wires", len(labels), p.nIn)
	}
	buf := make([]byte, opt.chunk())
	kinds, err := readKinds(r, p.nIn)
	if err != nil {
		return nil, err
	}
	k := newFixedKey(h.Key)

	L := p.getLabels()
	defer p.putLabels(L)
	L[p.zeroSlot] = Label{}
	L[p.oneSlot] = Label{} // the Garbler folded Δ into ¬a's zero-label: evaluate INV as a copy

	// Identity gates, a batch at a time; constant labels.
	if err := evalIdentity(k, h.ExecID, r, 1, kinds, labels, nil, L, buf); err != nil {
		return nil, err
	}
	if err := readConsts(r, kinds, p.nIn, L, buf); err != nil {
		return nil, err
	}

	if err := evalTables(ctx, p, k, L, r, buf); err != nil {
		return nil, err
	}
	d, err := readDecoding(r, p, L)
	if err != nil {
		return nil, err
	}
	if testHookEvaluate != nil {
		testHookEvaluate(append([]Label(nil), L...))
	}
	return &Result{Header: h, Masked: d}, nil
}

// evalTables evaluates p's gates over the labels L (the input wires' labels set), reading
// the AND gates' tables from r in schedule order, a buffer at a time.
func evalTables(ctx context.Context, p *Plan, k *fixedKey, L []Label, r io.Reader, buf []byte) error {
	return evalGates(ctx, p, k, L, len(buf)/32, func(n int) ([]byte, error) {
		if _, err := io.ReadFull(r, buf[:32*n]); err != nil {
			return nil, readErr("gate tables", err)
		}
		return buf[:32*n], nil
	})
}

// evalHeld evaluates p's gates against tables held in memory (a garbled-ahead execution's),
// in place, chunk gates at a time.
func evalHeld(ctx context.Context, p *Plan, k *fixedKey, L []Label, tab []byte, chunk int) error {
	return evalGates(ctx, p, k, L, chunk, func(n int) ([]byte, error) {
		if len(tab) < 32*n {
			return nil, readErr("gate tables", io.ErrUnexpectedEOF)
		}
		t := tab[:32*n]
		tab = tab[32*n:]
		return t, nil
	})
}

// evalGates evaluates p's gates over L, taking the next n AND gates' tables (n ≤ most) from
// next, in schedule order.
func evalGates(ctx context.Context, p *Plan, k *fixedKey, L []Label, most int, next func(n int) ([]byte, error)) error {
	t := uint64(0)
	err := p.forEachRun(func(and bool, ops []uint32) error {
		if !and {
			active.xor(L, ops)
			return nil
		}
		for len(ops) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(most, len(ops)/3)
			tab, err := next(n)
			if err != nil {
				return err
			}
			active.evalAND(k, L, ops[:3*n], tab, t)
			t += 2 * uint64(n)
			ops = ops[3*n:]
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gc: evaluate: %w", err)
	}
	return nil
}

func labelBytes(L []Label) []byte {
	if len(L) == 0 {
		return nil
	}
	return unsafe.Slice(&L[0][0], len(L)*LabelSize)
}

// getLabels returns a label array of p.slots entries from p's pool; putLabels erases it
// before it goes back, so no label outlives its execution.
func (p *Plan) getLabels() []Label {
	if l, ok := p.pool.Get().(*[]Label); ok {
		return *l
	}
	return make([]Label, p.slots)
}

func (p *Plan) putLabels(L []Label) {
	clear(L)
	p.pool.Put(&L)
}
