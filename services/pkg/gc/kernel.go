package gc

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The four loops that garbling and evaluation spend their time in. Each has a pure-Go
// version here and, on amd64, assembly versions (AES-NI with 8 blocks in flight, and VAES
// on 256-bit registers when the CPU has VAES and AVX2) chosen at start-up in
// kernel_amd64.go. Gate operands are flat triples (a, b, out) of label-slot indices that the
// caller has bounds-checked: plan.go checks them once per circuit (or per chunk for a
// streamed GateSource), so the loops do not.
type kernels struct {
	name string
	// encrypt sets dst[i] = π(src[i]).
	encrypt func(k *fixedKey, dst, src []Label)
	// garbleAND garbles the independent ANDs g (3 indices each) with half-gates: it reads
	// the zero-labels L[a], L[b], writes L[out] and the two rows TG ‖ TE (32 bytes) of each
	// gate to tab, using tweaks (t+2i, ^0) and (t+2i+1, ^0) for gate i.
	garbleAND func(k *fixedKey, c *andConsts, L []Label, g []uint32, tab []byte, t uint64)
	// evalAND evaluates the independent ANDs g from their rows in tab.
	evalAND func(k *fixedKey, L []Label, g []uint32, tab []byte, t uint64)
	// xor sets L[out] = L[a] ⊕ L[b] for each triple in order (the triples may depend on
	// each other).
	xor func(L []Label, g []uint32)
}

var genericKernels = kernels{
	name:      "purego",
	encrypt:   (*fixedKey).encryptGeneric,
	garbleAND: garbleANDGeneric,
	evalAND:   evalANDGeneric,
	xor:       xorGeneric,
}

// active is the kernel set in use; tests switch it to genericKernels to compare paths.
var active = bestKernels()

// andConsts is what the AND kernels keep in registers: Δ (zero when evaluating), σ(Δ),
// maskHi = (0, ~0) for σ and the tweaks, and the tweak increment (1, 0).
type andConsts struct {
	delta, sigmaDelta, maskHi, inc Label
}

func newANDConsts(delta *Label) *andConsts {
	c := &andConsts{maskHi: mkLabel(0, ^uint64(0)), inc: mkLabel(1, 0)}
	if delta != nil {
		c.delta, c.sigmaDelta = *delta, sigma(*delta)
	}
	return c
}

// evalConsts are the constants of evaluation (no Δ).
var evalConsts = *newANDConsts(nil)

// erase clears Δ from c.
func (c *andConsts) erase() {
	clear(c.delta[:])
	clear(c.sigmaDelta[:])
}

func xorGeneric(L []Label, g []uint32) {
	for i := 0; i+2 < len(g); i += 3 {
		L[g[i+2]] = xorLabel(L[g[i]], L[g[i+1]])
	}
}

func mask(bit uint64) uint64 { return -(bit & 1) }

// garbleANDGeneric is spec §8.5's AND with H(x, t) = π(σ(x) ⊕ t) ⊕ σ(x). σ is linear, so
// σ(x ⊕ Δ) = σ(x) ⊕ σ(Δ), and H(A,t) ⊕ H(A⊕Δ,t) = π(u) ⊕ π(u⊕σΔ) ⊕ σΔ with u = σ(A) ⊕ t.
func garbleANDGeneric(k *fixedKey, c *andConsts, L []Label, g []uint32, tab []byte, t uint64) {
	d, sd := c.delta, c.sigmaDelta
	x, y := &k.x, &k.y
	for i := 0; i+2 < len(g); i += 3 {
		A, B := L[g[i]], L[g[i+1]]
		sA, sB := sigma(A), sigma(B)
		x[0] = xorLabel(sA, mkLabel(t, gateTweakHi))
		x[1] = xorLabel(x[0], sd)
		x[2] = xorLabel(sB, mkLabel(t+1, gateTweakHi))
		x[3] = xorLabel(x[2], sd)
		k.encryptGeneric(y[:], x[:])
		hA0, hA1 := xorLabel(y[0], sA), xorLabel(xorLabel(y[1], sA), sd)
		hB0, hB1 := xorLabel(y[2], sB), xorLabel(xorLabel(y[3], sB), sd)
		pa, pb := mask(A.lo()), mask(B.lo())
		tg := xorLabel(xorLabel(hA0, hA1), mkLabel(d.lo()&pb, d.hi()&pb))
		wg := xorLabel(hA0, mkLabel(tg.lo()&pa, tg.hi()&pa))
		dB := xorLabel(hB0, hB1)
		te := xorLabel(dB, A)
		we := xorLabel(hB0, mkLabel(dB.lo()&pb, dB.hi()&pb))
		L[g[i+2]] = xorLabel(wg, we)
		copy(tab[0:16], tg[:])
		copy(tab[16:32], te[:])
		tab = tab[32:]
		t += 2
	}
}

func evalANDGeneric(k *fixedKey, L []Label, g []uint32, tab []byte, t uint64) {
	x, y := k.x[:2], k.y[:2]
	for i := 0; i+2 < len(g); i += 3 {
		A, B := L[g[i]], L[g[i+1]]
		sA, sB := sigma(A), sigma(B)
		x[0] = xorLabel(sA, mkLabel(t, gateTweakHi))
		x[1] = xorLabel(sB, mkLabel(t+1, gateTweakHi))
		k.encryptGeneric(y[:], x[:])
		tg := mkLabel(binary.LittleEndian.Uint64(tab[0:]), binary.LittleEndian.Uint64(tab[8:]))
		te := mkLabel(binary.LittleEndian.Uint64(tab[16:]), binary.LittleEndian.Uint64(tab[24:]))
		sa, sb := mask(A.lo()), mask(B.lo())
		wg := xorLabel(xorLabel(y[0], sA), mkLabel(tg.lo()&sa, tg.hi()&sa))
		teA := xorLabel(te, A)
		we := xorLabel(xorLabel(y[1], sB), mkLabel(teA.lo()&sb, teA.hi()&sb))
		L[g[i+2]] = xorLabel(wg, we)
		tab = tab[32:]
		t += 2
	}
}

// hashLabels sets dst[i] = H(src[i], tw[i]) for the identity gates (spec §8.5, E = H).
// scratch must hold len(src) labels.
func hashLabels(k *fixedKey, dst, src, tw, scratch []Label) {
	n := len(src)
	// On 64-bit words: σ and ⊕ only move and combine whole 8-byte halves, so the words'
	// byte order does not matter (a Label's value loop is 10× slower).
	s, t, x := u64s(src), u64s(tw[:n]), u64s(scratch[:n])
	for i := 0; i+1 < len(s); i += 2 {
		lo, hi := s[i], s[i+1]
		x[i] = hi ^ t[i]
		x[i+1] = lo ^ hi ^ t[i+1]
	}
	active.encrypt(k, dst[:n], scratch[:n])
	d := u64s(dst[:n])
	for i := 0; i+1 < len(s); i += 2 {
		lo, hi := s[i], s[i+1]
		d[i] ^= hi
		d[i+1] ^= lo ^ hi
	}
}

// leWord is the 64-bit word whose bytes in memory are LE64(x).
func leWord(x uint64) uint64 {
	if bigEndian {
		return bits.ReverseBytes64(x)
	}
	return x
}

var bigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// u64s views labels as 64-bit words in memory order: word 2i is bytes 0–7 of L[i] (its lo
// half on a little-endian machine), word 2i+1 bytes 8–15. Read and write them with
// binary.NativeEndian where they meet bytes.
func u64s(L []Label) []uint64 {
	if len(L) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&L[0])), 2*len(L))
}
