package pps

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestUnmaskInvertsMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, bits := range []int{1, 7, 8, 9, 32, 64, 65, 1000} {
		s := testSeed(byte(bits))
		o := make([]byte, OutputBytes(bits))
		for i := range o {
			o[i] = byte(rng.Uint32())
		}
		if rem := bits % 8; rem != 0 {
			o[len(o)-1] &= 1<<rem - 1
		}
		r := OutputMask(s, bits)
		masked := bytes.Clone(o)
		for i := range masked {
			masked[i] ^= r[i]
		}
		got, err := Unmask(s, masked, bits)
		if err != nil || !bytes.Equal(got, o) {
			t.Fatalf("%d bits: Unmask(o⊕r) = %x, %v; want %x", bits, got, err, o)
		}
	}
}

func TestUnmaskRejectsMalformed(t *testing.T) {
	s := testSeed(1)
	tests := []struct {
		name   string
		masked []byte
		bits   int
	}{
		{"too short", []byte{0}, 9},
		{"too long", []byte{0, 0}, 8},
		{"padding bit set", []byte{0x80}, 7},
		{"no bits", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Unmask(s, tt.masked, tt.bits); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmask: %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEncodeDecodeFixed(t *testing.T) {
	xs := []Fixed{0, 1, -1, MaxFixed, MinFixed, One}
	got, err := DecodeFixed(EncodeFixed(xs), len(xs))
	if err != nil {
		t.Fatal(err)
	}
	for i := range xs {
		if got[i] != xs[i] {
			t.Fatalf("value %d: %d, want %d", i, got[i], xs[i])
		}
	}
	if _, err := DecodeFixed(make([]byte, 7), 2); !errors.Is(err, ErrMalformed) {
		t.Fatalf("7 bytes as 2 values: %v", err)
	}
}

func FuzzUnmask(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4}, 32)
	f.Add([]byte{0x7f}, 7)
	f.Fuzz(func(t *testing.T, masked []byte, bits int) {
		o, err := Unmask(testSeed(2), masked, bits)
		if err == nil && len(o) != len(masked) {
			t.Fatalf("unmasked %d bytes from %d", len(o), len(masked))
		}
	})
}
