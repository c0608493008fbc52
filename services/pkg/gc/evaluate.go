package gc

import (
	"context"
	"encoding/binary"
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
	if h.CircuitHash != p.hash {
		return nil, ErrCircuitMismatch
	}
	if h.Inputs != uint64(p.nIn) || h.ANDs != uint64(p.nAND) || h.Outputs != uint64(p.nOut) {
		return nil, malformed("counts %d/%d/%d do not match the circuit's %d/%d/%d",
			h.Inputs, h.ANDs, h.Outputs, p.nIn, p.nAND, p.nOut)
	}
	if len(labels) != p.nIn {
		return nil, fmt.Errorf("gc: evaluate with %d input labels, circuit has %d input wires", len(labels), p.nIn)
	}
	chunk := opt.chunk()
	buf := make([]byte, chunk)
	kinds := make([]byte, (p.nIn+7)/8)
	if _, err := io.ReadFull(r, kinds); err != nil {
		return nil, readErr("input kinds", err)
	}
	if p.nIn%8 != 0 && kinds[len(kinds)-1]>>(p.nIn%8) != 0 {
		return nil, malformed("input kind padding bits are not zero")
	}
	isConst := func(u int) bool { return kinds[u/8]>>(u%8)&1 == 1 }
	k := newFixedKey(h.Key)

	L := p.getLabels()
	defer p.putLabels(L)
	L[p.zeroSlot] = Label{}
	L[p.oneSlot] = Label{} // the Garbler folded Δ into ¬a's zero-label: evaluate INV as a copy

	// Identity gates, a batch at a time.
	const batch = identityBatch
	sc := getIdentityScratch()
	defer putIdentityScratch(sc)
	src, tw, dst, scratch := sc.src[:], sc.tw[:], sc.dst[:], sc.tmp[:]
	idBuf := buf
	if len(idBuf) < 16*batch {
		idBuf = make([]byte, 16*batch)
	}
	tl := binary.NativeEndian.Uint64(h.ExecID[:8]) // tweakID(exec, u) = exec[0:8] ‖ LE64(u), as words
	lw, tws := u64s(L), u64s(tw)
	for base := 0; base < p.nIn; base += batch {
		end := min(base+batch, p.nIn)
		n := 0
		for u := base; u < end; u++ {
			if !isConst(u) {
				src[n] = labels[u]
				tws[2*n], tws[2*n+1] = tl, leWord(uint64(u))
				n++
			}
		}
		if _, err := io.ReadFull(r, idBuf[:16*n]); err != nil {
			return nil, readErr("identity tables", err)
		}
		hashLabels(k, dst[:n], src[:n], tw[:n], scratch[:n])
		h := u64s(dst[:n])
		i := 0
		for u := base; u < end; u++ {
			if isConst(u) {
				continue
			}
			// X = H(a, t) ⊕ (lsb(a) ? T_u : 0): the row of permute bit 0 is implicit.
			m := -uint64(labels[u][0] & 1)
			row := idBuf[16*i:]
			lw[2*u] = h[2*i] ^ binary.NativeEndian.Uint64(row)&m
			lw[2*u+1] = h[2*i+1] ^ binary.NativeEndian.Uint64(row[8:])&m
			i++
		}
	}
	for base := 0; base < p.nIn; {
		// Constant labels, in input order, at most a buffer at a time.
		m := 0
		u := base
		for ; u < p.nIn && 16*(m+1) <= len(buf); u++ {
			if isConst(u) {
				m++
			}
		}
		if _, err := io.ReadFull(r, buf[:16*m]); err != nil {
			return nil, readErr("constant labels", err)
		}
		i := 0
		for v := base; v < u; v++ {
			if isConst(v) {
				copy(L[v][:], buf[16*i:])
				i++
			}
		}
		base = u
	}

	if err := evalTables(ctx, p, k, L, r, buf); err != nil {
		return nil, err
	}
	d := make([]byte, (p.nOut+7)/8)
	if _, err := io.ReadFull(r, d); err != nil {
		return nil, readErr("decoding bits", err)
	}
	if p.nOut%8 != 0 && d[len(d)-1]>>(p.nOut%8) != 0 {
		return nil, malformed("decoding padding bits are not zero")
	}
	for j, s := range p.outSlots {
		d[j/8] ^= (L[s][0] & 1) << (j % 8)
	}
	if testHookEvaluate != nil {
		testHookEvaluate(append([]Label(nil), L...))
	}
	return &Result{Header: h, Masked: d}, nil
}

// evalTables evaluates p's gates over the labels L (the input wires' labels set), reading
// the AND gates' tables from r in schedule order, a buffer at a time.
func evalTables(ctx context.Context, p *Plan, k *fixedKey, L []Label, r io.Reader, buf []byte) error {
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
			n := min(len(buf)/32, len(ops)/3)
			if _, err := io.ReadFull(r, buf[:32*n]); err != nil {
				return readErr("gate tables", err)
			}
			active.evalAND(k, L, ops[:3*n], buf[:32*n], t)
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
