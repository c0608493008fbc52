package gc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// Garbling ahead (spec §8.5: the Garbler's labels do not depend on the inputs). Pregarble
// draws an execution's fresh Δ, π key and execID, draws the input wires' zero-labels at
// random and garbles every gate, writing the AND tables (the tables stream, version 3)
// before any input exists; the Garbler keeps Δ, the input zero-labels and the output
// wires' permute bits in a Pregarbled. When the inputs are known, Pregarbled.Garble writes
// the rest of that one execution (the inputs stream, version 4): identity tables of two
// rows, since the input zero-labels are already fixed (the 1-row option of Garble sets them
// from the publisher labels), constant labels and decoding bits, and erases the
// Pregarbled. A Pregarbled garbles one execution only: a second Garble is refused, and
// nothing of it can be passed in, so no Δ or execID serves twice (spec D22).
//
// The evaluator reads the tables stream into memory (ReadTables, 32 B per AND gate: a
// caller bounds the circuits it pregarbles) and evaluates the inputs stream against it
// (EvaluatePregarbled), which also uses the Tables once.

// ErrUsed means a Pregarbled or Tables was already used for its one execution, or erased.
var ErrUsed = errors.New("gc: pregarbled execution already used or erased")

// Pregarbled is the Garbler's state of one execution garbled ahead of its inputs.
type Pregarbled struct {
	p *Plan
	h Header // execID, π key, counts (its context is the tables stream's)

	mu     sync.Mutex
	used   bool
	delta  Label
	w0     []Label // input wires' zero-labels
	outLsb []byte  // lsb(W_j^0) of every output wire j, LSB first
}

// TablesSize is the length of p's tables stream with a context of ctxLen bytes.
func TablesSize(p *Plan, ctxLen int) int64 {
	return headerSize + int64(ctxLen) + 32*int64(p.nAND)
}

// InputsSize is the length of the inputs stream of a pregarbled execution of p with a
// context of ctxLen bytes: header, input kinds, 32 B per identity gate or 16 B per
// constant label (nConst of them), decoding bits.
func InputsSize(p *Plan, nConst, ctxLen int) int64 {
	n := int64(p.nIn)
	return headerSize + int64(ctxLen) + (n+7)/8 + 32*(n-int64(nConst)) + 16*int64(nConst) + int64(p.nOut+7)/8
}

// Pregarble garbles the gates of one execution of p ahead of its inputs and writes the
// tables stream to w (opt's Context goes in its header). The returned Pregarbled writes the
// execution's inputs stream once (Garble) and must be erased (Erase) if it is not used.
func Pregarble(ctx context.Context, p *Plan, w io.Writer, opt *Options) (*Pregarbled, error) {
	pg := &Pregarbled{p: p, h: Header{CircuitHash: p.hash, Inputs: uint64(p.nIn), ANDs: uint64(p.nAND),
		Outputs: uint64(p.nOut), version: tablesVersion}}
	if opt != nil {
		if len(opt.Context) > MaxContext {
			return nil, fmt.Errorf("gc: context of %d bytes (at most %d)", len(opt.Context), MaxContext)
		}
		pg.h.Context = append([]byte(nil), opt.Context...)
	}
	rand.Read(pg.delta[:])
	pg.delta[0] |= 1
	rand.Read(pg.h.Key[:])
	rand.Read(pg.h.ExecID[:])
	k := newFixedKey(pg.h.Key)

	L := p.getLabels()
	defer p.putLabels(L)
	inputLabels(L[:p.nIn])
	pg.w0 = append([]Label(nil), L[:p.nIn]...) // the schedule may reuse input slots
	L[p.zeroSlot] = Label{}
	L[p.oneSlot] = pg.delta

	sw := &streamWriter{w: w, buf: make([]byte, 0, opt.chunk())}
	sw.write(pg.h.appendTo(nil))
	err := garbleTables(ctx, p, k, &pg.delta, L, sw)
	if err == nil {
		sw.flush()
		if err = sw.err; err != nil {
			err = fmt.Errorf("gc: write tables stream: %w", err)
		}
	}
	if err != nil {
		pg.Erase()
		return nil, err
	}
	pg.outLsb = outputLsbs(p, L)
	if testHookGarble != nil {
		testHookGarble(pg.delta, append([]Label(nil), pg.w0...))
	}
	return pg, nil
}

// ExecID is the execution's id (in both streams' headers).
func (pg *Pregarbled) ExecID() [16]byte { return pg.h.ExecID }

// Erase erases Δ and the labels; Garble is refused afterwards.
func (pg *Pregarbled) Erase() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.used = true
	clear(pg.delta[:])
	clear(pg.w0)
	clear(pg.outLsb)
	pg.w0, pg.outLsb = nil, nil
}

// Garble writes the inputs stream of the pregarbled execution to w: inputs and mask as for
// Garble, opt's Context in its header. It erases the Pregarbled, whatever the outcome: an
// execution is garbled once (ErrUsed on a second call).
func (pg *Pregarbled) Garble(ctx context.Context, w io.Writer, inputs []Input, mask []byte, opt *Options) (*Header, error) {
	pg.mu.Lock()
	used := pg.used
	pg.used = true
	pg.mu.Unlock()
	if used {
		return nil, ErrUsed
	}
	defer pg.Erase()
	p := pg.p
	hctx, err := checkGarble(p, inputs, mask, opt)
	if err != nil {
		return nil, err
	}
	h := pg.h
	h.version, h.Context = inputsVersion, hctx
	sw := &streamWriter{w: w, buf: make([]byte, 0, opt.chunk())}
	sw.write(h.appendTo(nil))
	writeKinds(sw, inputs)
	if err := garbleIdentity2(h.Key, sw, h.ExecID, inputs, pg.w0, pg.delta); err != nil {
		return nil, fmt.Errorf("gc: write inputs stream: %w", err)
	}
	writeConsts(sw, inputs, pg.w0, pg.delta)
	writeDecoding(sw, p, pg.outLsb, mask)
	sw.flush()
	if sw.err != nil {
		return nil, fmt.Errorf("gc: write inputs stream: %w", sw.err)
	}
	return &h, nil
}

// garbleIdentity2 writes the two-row identity tables of the input wires whose zero-labels
// W0 are fixed: for publisher labels (a0, a1) and h_b = H(a_b, tweakID(exec, u)), row
// lsb(a0) is h_0 ⊕ W_u^0 and row lsb(a1) is h_1 ⊕ W_u^0 ⊕ Δ; the evaluator holding a gets
// X = H(a, t) ⊕ row[lsb(a)]. With 2+ cores and at least identityParallelMin wires, a second
// goroutine computes the rows of the second half into a buffer while this one writes the
// first half's straight into the stream's chunks; the buffer follows.
func garbleIdentity2(key [16]byte, sw *streamWriter, exec [16]byte, inputs []Input, W0 []Label, delta Label) error {
	split := len(inputs)
	if len(inputs) >= identityParallelMin && runtime.GOMAXPROCS(0) > 1 {
		split = len(inputs) / 2
	}
	var (
		tail []byte
		done chan struct{}
	)
	if split < len(inputs) {
		m := 0
		for u := split; u < len(inputs); u++ {
			if !inputs[u].Const {
				m++
			}
		}
		tail, done = make([]byte, 32*m), make(chan struct{})
		go func() {
			defer close(done)
			x := newIdentityHasherRange(newFixedKey(key), exec, inputs, split, len(inputs))
			defer x.done()
			off := 0
			rows2(x, inputs, W0, delta, func(n int) []byte {
				off += n
				return tail[off-n : off]
			}, func([]byte) {})
		}()
	}
	x := newIdentityHasherRange(newFixedKey(key), exec, inputs, 0, split)
	var scratch [32 * identityBatch / 2]byte
	rows2(x, inputs, W0, delta, func(n int) []byte {
		if sw.room() >= n { // straight into the chunk
			return sw.grow(n)
		}
		return scratch[:n]
	}, func(b []byte) {
		if len(b) > 0 && &b[0] == &scratch[0] {
			sw.write(b)
		}
	})
	x.done()
	clear(scratch[:])
	if done != nil {
		<-done
		sw.write(tail)
		clear(tail)
	}
	return sw.err
}

// identityParallelMin is the number of input wires from which garbleIdentity2 computes the
// rows on two goroutines (82,944 for a Table 2 statistic).
const identityParallelMin = 1 << 13

// rows2 computes the two-row identity tables of x's wires (garbleIdentity2), a batch at a
// time: dst(n) gives the n bytes the batch's rows go to, filled(b) is called with them.
func rows2(x *identityHasher, inputs []Input, W0 []Label, delta Label, dst func(n int) []byte, filled func(b []byte)) {
	w0 := u64s(W0)
	dl, dh := binary.NativeEndian.Uint64(delta[:8]), binary.NativeEndian.Uint64(delta[8:])
	for base, end, h, ok := x.next(); ok; base, end, h, ok = x.next() {
		out := dst(16 * len(h) / 2) // 2 words of h per row, 32 bytes per wire
		i := 0
		for u := base; u < end; u++ {
			in := &inputs[u]
			if in.Const {
				continue
			}
			r0 := 16 * int(in.A0[0]&1) // row of a0; a1's is the other
			r1 := 16 - r0
			row := out[16*i : 16*i+32]
			binary.NativeEndian.PutUint64(row[r0:], h[2*i]^w0[2*u])
			binary.NativeEndian.PutUint64(row[r0+8:], h[2*i+1]^w0[2*u+1])
			binary.NativeEndian.PutUint64(row[r1:], h[2*i+2]^w0[2*u]^dl)
			binary.NativeEndian.PutUint64(row[r1+8:], h[2*i+3]^w0[2*u+1]^dh)
			i += 2
		}
		filled(out)
	}
}

// Tables is the evaluator's copy of a pregarbled execution's AND tables.
type Tables struct {
	h   *Header
	mu  sync.Mutex
	tab []byte // nil once used
	// pre are the identity hashes of the labels prehashed (Prehash), nil when none.
	pre       []Label
	preLabels []Label
}

// Prehash hashes the evaluator's input labels for the identity gates of t's execution ahead
// of its inputs stream: H(labels[u], tweakID(exec, u)) depends on the labels and the
// execution's π key and execID only, which the tables' header holds, so the evaluator can
// compute it while the Garbler garbles the inputs; EvaluatePregarbled called with the same
// labels slice, unchanged, then only XORs each wire's row. The work is split over up to
// workers goroutines (at most one per 4,096 wires). The hashes of wires the stream turns out
// to carry as constants are not used. labels as for EvaluatePregarbled; EvaluatePregarbled
// with any other slice hashes them itself. ErrUsed once t is used.
func (t *Tables) Prehash(labels []Label, workers int) error {
	if uint64(len(labels)) != t.h.Inputs {
		return fmt.Errorf("gc: prehash %d input labels, circuit has %d input wires", len(labels), t.h.Inputs)
	}
	t.mu.Lock()
	used := t.tab == nil
	t.mu.Unlock()
	if used {
		return ErrUsed
	}
	pre := make([]Label, len(labels))
	tl := binary.NativeEndian.Uint64(t.h.ExecID[:8])
	workers = max(1, min(workers, len(labels)/4096))
	hash := func(from, to int) {
		k := newFixedKey(t.h.Key) // one per goroutine: the generic kernel uses its scratch
		sc := getIdentityScratch()
		defer putIdentityScratch(sc)
		tw := u64s(sc.tw[:])
		for base := from; base < to; base += identityBatch {
			end := min(base+identityBatch, to)
			n := end - base
			for i := range n {
				tw[2*i], tw[2*i+1] = tl, leWord(uint64(base+i))
			}
			hashLabels(k, pre[base:end], labels[base:end], sc.tw[:n], sc.tmp[:n])
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Go(func() { hash(len(labels)*w/workers, len(labels)*(w+1)/workers) })
	}
	hash(0, len(labels)/workers)
	wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tab == nil {
		clear(pre)
		return ErrUsed
	}
	clear(t.pre)
	t.pre, t.preLabels = pre, labels
	return nil
}

// ExecID is the execution's id.
func (t *Tables) ExecID() [16]byte { return t.h.ExecID }

// Header is the tables stream's header.
func (t *Tables) Header() *Header { return t.h }

// ReadTables reads a tables stream for p from r into memory (32 B per AND gate). It reads
// exactly the stream's bytes.
func ReadTables(p *Plan, r io.Reader) (*Tables, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	if h.version != tablesVersion {
		return nil, malformed("version %d, want a tables stream (%d)", h.version, tablesVersion)
	}
	if err := checkCounts(p, h); err != nil {
		return nil, err
	}
	t := &Tables{h: h, tab: make([]byte, 32*p.nAND)}
	if _, err := io.ReadFull(r, t.tab); err != nil {
		return nil, readErr("gate tables", err)
	}
	return t, nil
}

// EvaluatePregarbled reads the inputs stream of the execution whose tables t holds from r
// and evaluates it: labels as for Evaluate. t is used once (ErrUsed on a second call) and
// its tables are released.
func EvaluatePregarbled(ctx context.Context, p *Plan, t *Tables, r io.Reader, labels []Label, opt *Options) (*Result, error) {
	t.mu.Lock()
	tab, pre, preLabels := t.tab, t.pre, t.preLabels
	t.tab, t.pre, t.preLabels = nil, nil, nil
	t.mu.Unlock()
	if tab == nil {
		return nil, ErrUsed
	}
	defer clear(pre)
	if len(pre) == 0 || len(labels) != len(preLabels) || &labels[0] != &preLabels[0] {
		pre = nil // not these labels' hashes: evalIdentity hashes them
	}
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	if h.version != inputsVersion {
		return nil, malformed("version %d, want a pregarbled execution's inputs stream (%d)", h.version, inputsVersion)
	}
	if t.h.CircuitHash != p.hash {
		return nil, ErrCircuitMismatch
	}
	if err := checkCounts(p, h); err != nil {
		return nil, err
	}
	if h.ExecID != t.h.ExecID || h.Key != t.h.Key {
		return nil, malformed("inputs stream of execution %x, tables of %x", h.ExecID, t.h.ExecID)
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
	L[p.oneSlot] = Label{}
	if err := evalIdentity(k, h.ExecID, r, 2, kinds, labels, pre, L, buf); err != nil {
		return nil, err
	}
	if err := readConsts(r, kinds, p.nIn, L, buf); err != nil {
		return nil, err
	}
	if err := evalHeld(ctx, p, k, L, tab, len(buf)/32); err != nil {
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
