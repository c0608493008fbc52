package pps

import (
	"bytes"
	"crypto/rand"
	"math"
	"testing"

	"golang.org/x/crypto/chacha20"
)

// TestChaChaX16 checks the label PRG's 16-way ChaCha20 (chacha_amd64.s: AVX-512, and two
// 8-way AVX2 passes) against x/crypto's ChaCha20 with libsodium's DRG nonce, for random
// seeds at value indices 0, 1, a few others and the last index whose blocks fit the 32-bit
// counter; and that ValueLabels and DeriveLabels agree value by value. Each version the CPU
// has runs.
func TestChaChaX16(t *testing.T) {
	avx512, avx2 := chachaX16Variants()
	if !hasChaChaX16 || !(avx512 || avx2) {
		t.Skip("no 16-way ChaCha20 on this CPU or build")
	}
	defer func(v bool) { chachaX16AVX512 = v }(chachaX16AVX512)
	for _, variant := range []struct {
		name string
		has  bool
	}{{"avx512", avx512}, {"avx2", avx2}} {
		t.Run(variant.name, func(t *testing.T) {
			if !variant.has {
				t.Skip("not on this CPU")
			}
			chachaX16AVX512 = variant.name == "avx512"
			checkChaChaX16(t)
		})
	}
}

func checkChaChaX16(t *testing.T) {
	for i := range 20 {
		var seed Seed
		rand.Read(seed[:])
		for _, v := range []int{0, 1, 2, 17, 1000 + i, math.MaxUint32/16 - 1} {
			var got [valueLabelBytes]byte
			valueKeystream(&seed, v, &got)
			want := make([]byte, valueLabelBytes)
			c, err := chacha20.NewUnauthenticatedCipher(seed[:], drgNonce)
			if err != nil {
				t.Fatal(err)
			}
			c.SetCounter(uint32(16 * v))
			c.XORKeyStream(want, want)
			if !bytes.Equal(got[:], want) {
				t.Fatalf("seed %x value %d: 16-way ChaCha20 differs from x/crypto", seed, v)
			}
		}
		all := DeriveLabels(&seed, 5)
		for v := range 5 {
			one := ValueLabels(&seed, v)
			if !bytes.Equal(pairBytes(one[:]), pairBytes(all[v*ValueBits:(v+1)*ValueBits])) {
				t.Fatalf("ValueLabels and DeriveLabels differ at value %d", v)
			}
		}
	}
}

func pairBytes(ps []LabelPair) []byte {
	var b []byte
	for _, p := range ps {
		b = append(b, p[0][:]...)
		b = append(b, p[1][:]...)
	}
	return b
}

// BenchmarkValueLabels derives one value's 32 label pairs (1 KiB of ChaCha20), and as the
// same-run baseline the same keystream through x/crypto's pure-Go ChaCha20 (prgAt, the
// path without AVX2 or AVX-512).
func BenchmarkValueLabels(b *testing.B) {
	var seed Seed
	rand.Read(seed[:])
	b.Run("labels", func(b *testing.B) {
		b.SetBytes(valueLabelBytes)
		for b.Loop() {
			ValueLabels(&seed, 3)
		}
	})
	b.Run("xcrypto", func(b *testing.B) {
		var buf [valueLabelBytes]byte
		b.SetBytes(valueLabelBytes)
		for b.Loop() {
			clear(buf[:])
			prgAt(&seed, 3*2*ValueBits, buf[:])
		}
	})
}
