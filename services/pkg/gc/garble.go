package gc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Input is how the Garbler feeds one input wire.
type Input struct {
	// Const marks a wire with a constant value (a nullified publisher's nullifying bit, or
	// a value the Garbler hard-wires): the stream carries the one label of Bit, so Δ stays
	// hidden (spec §3.5).
	Const bool
	// Bit is the constant's value when Const is set.
	Bit bool
	// A0 and A1 are the publisher's labels for bit 0 and bit 1 (spec §8.2) when Const is
	// not set. Their permute bits must differ: the identity gate's row is lsb(a).
	A0, A1 Label
}

// Options tune Garble and Evaluate. The zero value is the default.
type Options struct {
	// Context is carried in the stream header for the caller (at most MaxContext bytes).
	// Evaluate ignores it.
	Context []byte
	// ChunkSize is how many bytes of tables are buffered between writes (Garble) or reads
	// (Evaluate); it bounds the engine's stream memory. Default DefaultChunkSize; it is
	// rounded down to a multiple of 32, at least 32.
	ChunkSize int
}

// DefaultChunkSize is the default stream buffer: 2048 AND gates.
const DefaultChunkSize = 64 << 10

// ErrPermuteBits means an identity input's labels have equal permute bits.
var ErrPermuteBits = errors.New("gc: input labels a0 and a1 have the same permute bit")

func (o *Options) chunk() int {
	n := DefaultChunkSize
	if o != nil && o.ChunkSize > 0 {
		n = o.ChunkSize
	}
	return max(n&^31, 32)
}

// Test hooks, nil outside tests: testHookGarble receives each execution's Δ and a copy of
// the Garbler's zero-labels of every slot before they are erased, testHookEvaluate a copy
// of the evaluator's labels (TestFreshPerExecution, TestEvaluatorView).
var (
	testHookGarble   func(delta Label, w0 []Label)
	testHookEvaluate func(x []Label)
)

// Garble garbles one execution of p and writes it to w in the stream format (stream.go).
// Every call draws a fresh Δ (lsb 1), π key and execID from crypto/rand and erases Δ and
// the labels before returning, so no two executions share them and none can be reused:
// there is no way to pass them in (spec D22). inputs has one entry per input wire; mask
// holds the output mask r, ⌈m/8⌉ bytes LSB first (nil for none), folded into the decoding
// bits (spec §3.7). It returns the header it wrote.
func Garble(ctx context.Context, p *Plan, w io.Writer, inputs []Input, mask []byte, opt *Options) (*Header, error) {
	hctx, err := checkGarble(p, inputs, mask, opt)
	if err != nil {
		return nil, err
	}
	h := &Header{CircuitHash: p.hash, Inputs: uint64(p.nIn), ANDs: uint64(p.nAND), Outputs: uint64(p.nOut), Context: hctx}

	var delta Label
	rand.Read(delta[:])
	delta[0] |= 1
	rand.Read(h.Key[:])
	rand.Read(h.ExecID[:])
	k := newFixedKey(h.Key)

	L := p.getLabels()
	defer p.putLabels(L)
	defer clear(delta[:])
	inputLabels(L[:p.nIn])
	L[p.zeroSlot] = Label{}
	L[p.oneSlot] = delta // INV a = a ⊕ one: the Garbler's zero-label of ¬a is W_a^0 ⊕ Δ

	sw := &streamWriter{w: w, buf: make([]byte, 0, opt.chunk())}
	sw.write(h.appendTo(nil))

	// Input kinds, identity tables, constant labels.
	writeKinds(sw, inputs)
	if err := garbleIdentity(k, sw, h.ExecID, inputs, L[:p.nIn], delta); err != nil {
		return nil, err
	}
	writeConsts(sw, inputs, L, delta)

	// Gate tables, chunk by chunk.
	if err := garbleTables(ctx, p, k, &delta, L, sw); err != nil {
		return nil, err
	}

	writeDecoding(sw, p, outputLsbs(p, L), mask)
	sw.flush()
	if sw.err != nil {
		return nil, fmt.Errorf("gc: write garbled stream: %w", sw.err)
	}
	if testHookGarble != nil {
		testHookGarble(delta, append([]Label(nil), L...))
	}
	return h, nil
}

// garbleTables garbles p's gates over the labels L (the input wires' zero-labels set) and
// writes the AND gates' tables to sw in schedule order, chunk by chunk.
func garbleTables(ctx context.Context, p *Plan, k *fixedKey, delta *Label, L []Label, sw *streamWriter) error {
	consts := newANDConsts(delta)
	defer consts.erase()
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
			room := sw.room() / 32
			if room == 0 {
				sw.flush()
				room = sw.room() / 32
			}
			n := min(room, len(ops)/3)
			tab := sw.grow(32 * n)
			active.garbleAND(k, consts, L, ops[:3*n], tab, t)
			t += 2 * uint64(n)
			ops = ops[3*n:]
		}
		return sw.err
	})
	if err != nil {
		return fmt.Errorf("gc: garble: %w", err)
	}
	return nil
}

// inputLabels fills W with the input wires' fresh zero-labels. With the AES-NI kernels they
// are AES-128 in counter mode under a key drawn from crypto/rand for this call alone and
// erased after it (a PRG, as EMP-toolkit draws its labels): 5–10× faster than reading
// 1.3 MB from crypto/rand for the 82,944 inputs of a Table 2 execution. The pure-Go path
// reads crypto/rand, since crypto/aes would keep the key's schedule beyond our reach.
func inputLabels(W []Label) {
	if len(W) == 0 {
		return
	}
	if active.name == genericKernels.name {
		rand.Read(labelBytes(W))
		return
	}
	var key Label
	rand.Read(key[:])
	k := new(fixedKey)
	expandKey128(key, &k.rk)
	clear(key[:])
	for i := range k.rk {
		copy(k.rk256[i][:16], k.rk[i][:])
		copy(k.rk256[i][16:], k.rk[i][:])
	}
	w := u64s(W)
	for i := range W {
		w[2*i], w[2*i+1] = uint64(i), 0 // distinct counters
	}
	active.encrypt(k, W, W)
	clear(k.rk[:])
	clear(k.rk256[:])
}

// garbleIdentity writes the identity tables, one row per input wire u with publisher labels
// (a0, a1): the spec's optional 1-ciphertext identity gate (§8.5, GRR-style). With
// h_b = H(a_b, tweakID(exec, u)), the label of the bit c whose a_c has permute bit 0 is
// W_u^c = h_c, so its row is implicitly zero and not sent; the other row is
// T_u = h_0 ⊕ h_1 ⊕ Δ. The evaluator holding a gets h = H(a, t) and X = h when lsb(a) = 0,
// X = h ⊕ T_u when lsb(a) = 1. It writes W_u^0 into W0[u] (replacing the random label),
// 16 bytes per wire instead of two 16-byte rows. H is the fixed-key hash rather than AES
// keyed by a: it runs in the same batched fixed-key AES as the gates (no key schedule per
// wire), and a_b, uniformly random and independent of Δ, is a fine input to a CCR hash
// keyed by a fresh π.
func garbleIdentity(k *fixedKey, sw *streamWriter, exec [16]byte, inputs []Input, W0 []Label, delta Label) error {
	w0 := u64s(W0)
	dl, dh := binary.NativeEndian.Uint64(delta[:8]), binary.NativeEndian.Uint64(delta[8:])
	var tmp [16]byte
	x := newIdentityHasher(k, exec, inputs)
	defer x.done()
	for base, end, h, ok := x.next(); ok; base, end, h, ok = x.next() {
		i := 0
		for u := base; u < end; u++ {
			in := &inputs[u]
			if in.Const {
				continue
			}
			h0l, h0h, h1l, h1h := h[2*i], h[2*i+1], h[2*i+2], h[2*i+3]
			if in.A0[0]&1 == 0 { // c = 0: W⁰ = h0
				w0[2*u], w0[2*u+1] = h0l, h0h
			} else { // c = 1: W¹ = h1, W⁰ = h1 ⊕ Δ
				w0[2*u], w0[2*u+1] = h1l^dl, h1h^dh
			}
			row := tmp[:]
			direct := sw.room() >= 16
			if direct {
				row = sw.grow(16)
			}
			binary.NativeEndian.PutUint64(row, h0l^h1l^dl)
			binary.NativeEndian.PutUint64(row[8:], h0h^h1h^dh)
			if !direct {
				sw.write(row)
			}
			i += 2
		}
	}
	return sw.err
}

// identityBatch is how many identity-gate hashes are batched per fixed-key AES call.
const identityBatch = 512

type identityScratch struct{ src, tw, dst, tmp [identityBatch]Label }

var identityPool = sync.Pool{New: func() any { return new(identityScratch) }}

func getIdentityScratch() *identityScratch { return identityPool.Get().(*identityScratch) }

// putIdentityScratch erases the publisher labels and hashes before reuse.
func putIdentityScratch(s *identityScratch) {
	clear(s.src[:])
	clear(s.dst[:])
	clear(s.tmp[:])
	identityPool.Put(s)
}

// streamWriter buffers one chunk and remembers the first write error.
type streamWriter struct {
	w   io.Writer
	buf []byte
	n   int64
	err error
}

func (s *streamWriter) room() int { return cap(s.buf) - len(s.buf) }

func (s *streamWriter) flush() {
	if s.err == nil && len(s.buf) > 0 {
		var n int
		n, s.err = s.w.Write(s.buf)
		s.n += int64(n)
	}
	s.buf = s.buf[:0]
}

// grow appends n bytes (n ≤ room) and returns them.
func (s *streamWriter) grow(n int) []byte {
	l := len(s.buf)
	s.buf = s.buf[:l+n]
	return s.buf[l : l+n]
}

func (s *streamWriter) write(b []byte) {
	for len(b) > 0 {
		if s.room() == 0 {
			s.flush()
		}
		c := copy(s.buf[len(s.buf):cap(s.buf)], b)
		s.buf = s.buf[:len(s.buf)+c]
		b = b[c:]
	}
}
