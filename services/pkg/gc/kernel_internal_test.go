package gc

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"testing"
)

// kernelSets lists the kernel sets this machine can run, the pure-Go one first.
func kernelSets() []kernels {
	ks := []kernels{genericKernels}
	if b := bestKernels(); b.name != genericKernels.name {
		ks = append(ks, b)
	}
	return append(ks, extraKernels()...)
}

// withKernels runs f with ks active (tests that force the fallback use genericKernels).
func withKernels(ks kernels, f func()) {
	old := active
	active = ks
	defer func() { active = old }()
	f()
}

func TestExpandKeyFIPS197(t *testing.T) {
	// FIPS-197 Appendix A.1: key 2b7e1516…, last round key d014f9a8c9ee2589e13f0cc8b6630ca6.
	var key Label
	copy(key[:], []byte{0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c})
	var rk [11]Label
	expandKey128(key, &rk)
	want := []byte{0xd0, 0x14, 0xf9, 0xa8, 0xc9, 0xee, 0x25, 0x89, 0xe1, 0x3f, 0x0c, 0xc8, 0xb6, 0x63, 0x0c, 0xa6}
	if !bytes.Equal(rk[10][:], want) {
		t.Fatalf("round key 10 = %x, want %x", rk[10], want)
	}
}

// TestKernelsAgree checks every kernel set against crypto/aes and the pure-Go kernels on
// random inputs of every length up to 40 (so the 8-, 4-, 2- and 1-wide loops all run).
func TestKernelsAgree(t *testing.T) {
	var key, delta Label
	rand.Read(key[:])
	rand.Read(delta[:])
	delta[0] |= 1
	k := newFixedKey(key)
	blk, _ := aes.NewCipher(key[:])
	const slots = 300
	for _, ks := range kernelSets() {
		for n := 0; n <= 40; n++ {
			src := make([]Label, n)
			rand.Read(labelBytes(src))
			got, want := make([]Label, n), make([]Label, n)
			ks.encrypt(k, got, src)
			for i := range src {
				blk.Encrypt(want[i][:], src[i][:])
			}
			if !bytes.Equal(labelBytes(got), labelBytes(want)) {
				t.Fatalf("%s: encrypt of %d blocks differs from crypto/aes", ks.name, n)
			}

			// n independent ANDs reading slots [0,100), writing [100+…).
			g := make([]uint32, 0, 3*n)
			for i := range n {
				g = append(g, uint32(mrand.IntN(100)), uint32(mrand.IntN(100)), uint32(100+3*i))
			}
			L0 := make([]Label, slots)
			rand.Read(labelBytes(L0))
			t0 := mrand.Uint64()
			La, Lb := append([]Label(nil), L0...), append([]Label(nil), L0...)
			tabA, tabB := make([]byte, 32*n), make([]byte, 32*n)
			genericKernels.garbleAND(k, newANDConsts(&delta), La, g, tabA, t0)
			ks.garbleAND(k, newANDConsts(&delta), Lb, g, tabB, t0)
			if !bytes.Equal(tabA, tabB) || !bytes.Equal(labelBytes(La), labelBytes(Lb)) {
				t.Fatalf("%s: garbleAND of %d gates differs from pure Go", ks.name, n)
			}
			// Evaluate on active labels W0 ⊕ v·Δ for random v and compare to garbled.
			X := append([]Label(nil), L0...)
			for s := range 100 {
				if mrand.IntN(2) == 1 {
					X[s] = xorLabel(X[s], delta)
				}
			}
			Xa, Xb := append([]Label(nil), X...), append([]Label(nil), X...)
			genericKernels.evalAND(k, Xa, g, tabA, t0)
			ks.evalAND(k, Xb, g, tabA, t0)
			if !bytes.Equal(labelBytes(Xa), labelBytes(Xb)) {
				t.Fatalf("%s: evalAND of %d gates differs from pure Go", ks.name, n)
			}
			for i := range n {
				a, b, c := g[3*i], g[3*i+1], g[3*i+2]
				va, vb := X[a] != L0[a], X[b] != L0[b]
				want := La[c]
				if va && vb {
					want = xorLabel(want, delta)
				}
				if Xb[c] != want {
					t.Fatalf("%s: AND gate %d evaluates to the wrong label", ks.name, i)
				}
			}
			// XOR chains (dependent triples).
			gx := make([]uint32, 0, 3*n)
			for i := range n {
				gx = append(gx, uint32(mrand.IntN(100+i)), uint32(mrand.IntN(100+i)), uint32(100+i))
			}
			Ya, Yb := append([]Label(nil), L0...), append([]Label(nil), L0...)
			genericKernels.xor(Ya, gx)
			ks.xor(Yb, gx)
			if !bytes.Equal(labelBytes(Ya), labelBytes(Yb)) {
				t.Fatalf("%s: xor of %d gates differs from pure Go", ks.name, n)
			}
		}
	}
	_ = binary.LittleEndian
}
