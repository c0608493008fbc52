package gc

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The input side of both stream kinds, shared by the full stream (Garble, Evaluate: 1-row
// identity gates) and a garbled-ahead execution's inputs stream (Pregarbled.Garble,
// EvaluatePregarbled: 2-row identity gates): the argument checks, the input kinds, the
// identity hashes, the constant labels and the decoding bits.

// checkGarble checks Garble's arguments for p and returns the header context to send.
func checkGarble(p *Plan, inputs []Input, mask []byte, opt *Options) ([]byte, error) {
	if len(inputs) != p.nIn {
		return nil, fmt.Errorf("gc: garble with %d inputs, circuit has %d input wires", len(inputs), p.nIn)
	}
	if mask != nil && len(mask) != (p.nOut+7)/8 {
		return nil, fmt.Errorf("gc: mask of %d bytes, want %d", len(mask), (p.nOut+7)/8)
	}
	var hctx []byte
	if opt != nil {
		if len(opt.Context) > MaxContext {
			return nil, fmt.Errorf("gc: context of %d bytes (at most %d)", len(opt.Context), MaxContext)
		}
		hctx = append([]byte(nil), opt.Context...)
	}
	for u, in := range inputs {
		if !in.Const && in.A0.Lsb() == in.A1.Lsb() {
			return nil, fmt.Errorf("gc: input wire %d: %w", u, ErrPermuteBits)
		}
	}
	return hctx, nil
}

// writeKinds writes the input kinds: bit u set when input wire u is a constant.
func writeKinds(sw *streamWriter, inputs []Input) {
	kinds := make([]byte, (len(inputs)+7)/8)
	for u, in := range inputs {
		if in.Const {
			kinds[u/8] |= 1 << (u % 8)
		}
	}
	sw.write(kinds)
}

// writeConsts writes the one label of every constant input wire's value, in input order:
// W[u] or W[u] ⊕ Δ.
func writeConsts(sw *streamWriter, inputs []Input, W []Label, delta Label) {
	for u, in := range inputs {
		if in.Const {
			l := W[u]
			if in.Bit {
				l = xorLabel(l, delta)
			}
			sw.write(l[:])
		}
	}
}

// outputLsbs is lsb(W_j^0) of every output wire j, LSB first.
func outputLsbs(p *Plan, L []Label) []byte {
	d := make([]byte, (p.nOut+7)/8)
	for j, s := range p.outSlots {
		d[j/8] |= (L[s][0] & 1) << (j % 8)
	}
	return d
}

// writeDecoding writes p's decoding bits: lsbs ⊕ mask (spec §3.7), the mask's padding bits
// beyond p's outputs ignored.
func writeDecoding(sw *streamWriter, p *Plan, lsbs, mask []byte) {
	d := append([]byte(nil), lsbs...)
	if mask != nil {
		for j := range d {
			d[j] ^= mask[j]
		}
		if p.nOut%8 != 0 {
			d[len(d)-1] &= 1<<(p.nOut%8) - 1
		}
	}
	sw.write(d)
}

// identityHasher hashes both publisher labels of every identity input wire,
// h_b = H(a_b, tweakID(exec, u)), a batch at a time in the fixed-key AES: each next call
// returns the batch of wires [base, end) with h holding 4 words per non-constant wire in
// order (h_0 low, high, h_1 low, high), until ok is false. done returns its scratch.
type identityHasher struct {
	k          *fixedKey
	inputs     []Input
	tl         uint64 // tweakID(exec, u) = exec[0:8] ‖ LE64(u), as words
	sc         *identityScratch
	base, stop int
}

func newIdentityHasher(k *fixedKey, exec [16]byte, inputs []Input) *identityHasher {
	return newIdentityHasherRange(k, exec, inputs, 0, len(inputs))
}

// newIdentityHasherRange hashes the wires [from, to) of inputs only.
func newIdentityHasherRange(k *fixedKey, exec [16]byte, inputs []Input, from, to int) *identityHasher {
	return &identityHasher{k: k, inputs: inputs, tl: binary.NativeEndian.Uint64(exec[:8]), sc: getIdentityScratch(), base: from, stop: to}
}

func (x *identityHasher) next() (base, end int, h []uint64, ok bool) {
	const batch = identityBatch / 2
	if x.base >= x.stop {
		return 0, 0, nil, false
	}
	base, end = x.base, min(x.base+batch, x.stop)
	x.base = end
	src, tw, dst, scratch := x.sc.src[:], x.sc.tw[:], x.sc.dst[:], x.sc.tmp[:]
	t := u64s(tw)
	n := 0
	for u := base; u < end; u++ {
		in := &x.inputs[u]
		if in.Const {
			continue
		}
		src[n], src[n+1] = in.A0, in.A1
		th := leWord(uint64(u))
		t[2*n], t[2*n+1], t[2*n+2], t[2*n+3] = x.tl, th, x.tl, th
		n += 2
	}
	hashLabels(x.k, dst[:n], src[:n], tw[:n], scratch[:n])
	return base, end, u64s(dst[:n]), true
}

func (x *identityHasher) done() { putIdentityScratch(x.sc) }

// checkCounts checks that h is a stream of p.
func checkCounts(p *Plan, h *Header) error {
	if h.CircuitHash != p.hash {
		return ErrCircuitMismatch
	}
	if h.Inputs != uint64(p.nIn) || h.ANDs != uint64(p.nAND) || h.Outputs != uint64(p.nOut) {
		return malformed("counts %d/%d/%d do not match the circuit's %d/%d/%d",
			h.Inputs, h.ANDs, h.Outputs, p.nIn, p.nAND, p.nOut)
	}
	return nil
}

// inputKinds is the stream's input kinds, read by readKinds.
type inputKinds []byte

func (k inputKinds) isConst(u int) bool { return k[u/8]>>(u%8)&1 == 1 }

func readKinds(r io.Reader, nIn int) (inputKinds, error) {
	kinds := make([]byte, (nIn+7)/8)
	if _, err := io.ReadFull(r, kinds); err != nil {
		return nil, readErr("input kinds", err)
	}
	if nIn%8 != 0 && kinds[len(kinds)-1]>>(nIn%8) != 0 {
		return nil, malformed("input kind padding bits are not zero")
	}
	return kinds, nil
}

// evalIdentity reads the identity tables of rows rows per wire from r and sets L[u] of every
// non-constant input wire u from its label a = labels[u] and h = H(a, tweakID(exec, u)):
// with 1 row (Garble's), X = h ⊕ (lsb(a) ? T_u : 0), the row of permute bit 0 being
// implicit; with 2 rows (Pregarbled.Garble's), X = h ⊕ row[lsb(a)]. pre, when not nil,
// holds every wire's h already (Tables.Prehash; 2 rows only). buf is scratch.
func evalIdentity(k *fixedKey, exec [16]byte, r io.Reader, rows int, kinds inputKinds, labels, pre, L []Label, buf []byte) error {
	const batch = identityBatch
	sc := getIdentityScratch()
	defer putIdentityScratch(sc)
	src, tw, dst, scratch := sc.src[:], sc.tw[:], sc.dst[:], sc.tmp[:]
	rb := 16 * rows
	idBuf := buf
	if len(idBuf) < rb*batch {
		idBuf = make([]byte, rb*batch)
	}
	tl := binary.NativeEndian.Uint64(exec[:8])
	lw, tws := u64s(L), u64s(tw)
	if pre != nil && rows == 2 {
		return evalIdentityPrehashed(r, kinds, labels, pre, L, idBuf)
	}
	for base := 0; base < len(labels); base += batch {
		end := min(base+batch, len(labels))
		n := 0
		for u := base; u < end; u++ {
			if !kinds.isConst(u) {
				src[n] = labels[u]
				tws[2*n], tws[2*n+1] = tl, leWord(uint64(u))
				n++
			}
		}
		if _, err := io.ReadFull(r, idBuf[:rb*n]); err != nil {
			return readErr("identity tables", err)
		}
		hashLabels(k, dst[:n], src[:n], tw[:n], scratch[:n])
		h := u64s(dst[:n])
		i := 0
		if rows == 1 {
			for u := base; u < end; u++ {
				if kinds.isConst(u) {
					continue
				}
				m := -uint64(labels[u][0] & 1) // the row of permute bit 0 is implicit
				row := idBuf[16*i:]
				lw[2*u] = h[2*i] ^ binary.NativeEndian.Uint64(row)&m
				lw[2*u+1] = h[2*i+1] ^ binary.NativeEndian.Uint64(row[8:])&m
				i++
			}
			continue
		}
		for u := base; u < end; u++ {
			if kinds.isConst(u) {
				continue
			}
			row := idBuf[32*i+16*int(labels[u][0]&1):]
			lw[2*u] = h[2*i] ^ binary.NativeEndian.Uint64(row)
			lw[2*u+1] = h[2*i+1] ^ binary.NativeEndian.Uint64(row[8:])
			i++
		}
	}
	return nil
}

// evalIdentityPrehashed is evalIdentity's 2-row loop over hashes computed ahead (pre[u] =
// H(labels[u], tweakID(exec, u))): it reads a buffer of rows at a time and sets
// L[u] = pre[u] ⊕ row[lsb(labels[u])].
func evalIdentityPrehashed(r io.Reader, kinds inputKinds, labels, pre, L []Label, buf []byte) error {
	lw, hw := u64s(L), u64s(pre)
	most := len(buf) / 32
	for base := 0; base < len(labels); {
		n, end := 0, base
		for ; end < len(labels) && n < most; end++ {
			if !kinds.isConst(end) {
				n++
			}
		}
		if _, err := io.ReadFull(r, buf[:32*n]); err != nil {
			return readErr("identity tables", err)
		}
		i := 0
		for u := base; u < end; u++ {
			if kinds.isConst(u) {
				continue
			}
			row := buf[32*i+16*int(labels[u][0]&1):]
			lw[2*u] = hw[2*u] ^ binary.NativeEndian.Uint64(row)
			lw[2*u+1] = hw[2*u+1] ^ binary.NativeEndian.Uint64(row[8:])
			i++
		}
		base = end
	}
	return nil
}

// readConsts reads the constant input wires' labels into L, in input order, at most a
// buffer at a time.
func readConsts(r io.Reader, kinds inputKinds, nIn int, L []Label, buf []byte) error {
	for base := 0; base < nIn; {
		m := 0
		u := base
		for ; u < nIn && 16*(m+1) <= len(buf); u++ {
			if kinds.isConst(u) {
				m++
			}
		}
		if _, err := io.ReadFull(r, buf[:16*m]); err != nil {
			return readErr("constant labels", err)
		}
		i := 0
		for v := base; v < u; v++ {
			if kinds.isConst(v) {
				copy(L[v][:], buf[16*i:])
				i++
			}
		}
		base = u
	}
	return nil
}

// readDecoding reads the decoding bits and returns (o ⊕ r): each bit ⊕ lsb of the output
// wire's label in L.
func readDecoding(r io.Reader, p *Plan, L []Label) ([]byte, error) {
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
	return d, nil
}
