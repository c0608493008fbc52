package pps

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestLabelsForceOppositeLSB(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var s Seed
		for i := range s {
			s[i] = byte(rng.Uint32())
		}
		for i, p := range DeriveLabels(&s, 3) {
			if p[0].LSB() == p[1].LSB() {
				t.Fatalf("pair %d: lsb(w0) = lsb(w1) = %d", i, p[0].LSB())
			}
			if p[0] == p[1] {
				t.Fatalf("pair %d: w0 = w1", i)
			}
		}
	}
}

func TestLabelsUseTheirPRGBlocks(t *testing.T) {
	s := testSeed(9)
	pairs := DeriveLabels(s, 2)
	for idx, p := range pairs {
		w0 := PRGBlock(s, uint64(2*idx))
		w1 := PRGBlock(s, uint64(2*idx+1))
		if p[0] != Label(w0) {
			t.Errorf("w0 of bit %d is not PRG block %d", idx, 2*idx)
		}
		// Only the lsb of w1 is forced.
		w1[0] = w1[0]&0xFE | p[1][0]&1
		if p[1] != Label(w1) {
			t.Errorf("w1 of bit %d differs from PRG block %d beyond its lsb", idx, 2*idx+1)
		}
	}
}

func TestPublishLabelsSelectsByBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := testSeed(10)
	for range 100 {
		xs := []Fixed{Fixed(rng.Uint32()), Fixed(rng.Uint32()), MinFixed, MaxFixed, 0}
		pairs := DeriveLabels(s, len(xs))
		got, err := SplitPublished(PublishLabels(s, xs), len(xs))
		if err != nil {
			t.Fatal(err)
		}
		for v, x := range xs {
			for j := range ValueBits {
				if got[v*ValueBits+j] != pairs[v*ValueBits+j][uint32(x)>>j&1] {
					t.Fatalf("value %d bit %d: the published label is not w_{x[j]}", v, j)
				}
			}
		}
	}
}

func TestSplitPublishedRejectsWrongLength(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		values int
	}{
		{"empty", 0, 1},
		{"one label short", 32*16 - 16, 1},
		{"one byte long", 32*16 + 1, 1},
		{"two values for one", 2 * 32 * 16, 1},
		{"zero values", 0, 0},
		{"negative values", 16, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := SplitPublished(make([]byte, tt.n), tt.values); !errors.Is(err, ErrMalformed) {
				t.Fatalf("SplitPublished(%d bytes, %d values): %v, want ErrMalformed", tt.n, tt.values, err)
			}
		})
	}
}

func TestPRGIsAPrefixStream(t *testing.T) {
	s := testSeed(11)
	long := make([]byte, 1000)
	PRG(s, long)
	for _, n := range []int{1, 15, 64, 65, 999} {
		short := make([]byte, n)
		for i := range short {
			short[i] = 0xAA // PRG overwrites, it does not XOR into its output
		}
		PRG(s, short)
		if !bytes.Equal(short, long[:n]) {
			t.Errorf("PRG(%d) is not a prefix of PRG(1000)", n)
		}
	}
}

func FuzzSplitPublished(f *testing.F) {
	f.Add(make([]byte, 512), 1)
	f.Add(make([]byte, 1024), 2)
	f.Add([]byte{1, 2, 3}, 1)
	f.Fuzz(func(t *testing.T, b []byte, values int) {
		labels, err := SplitPublished(b, values)
		if err != nil {
			return
		}
		if len(labels)*LabelSize != len(b) || len(labels) != values*ValueBits {
			t.Fatalf("accepted %d bytes as %d labels for %d values", len(b), len(labels), values)
		}
	})
}
