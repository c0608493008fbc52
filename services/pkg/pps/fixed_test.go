package pps

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestFixedArithmeticEdgeCases(t *testing.T) {
	const lsb Fixed = 1
	tests := []struct {
		name string
		got  Fixed
		want Fixed
	}{
		{"add wraps at INT32_MAX", MaxFixed.Add(lsb), MinFixed},
		{"sub wraps at INT32_MIN", MinFixed.Sub(lsb), MaxFixed},
		{"neg INT32_MIN", MinFixed.Neg(), MinFixed},
		{"abs INT32_MIN", MinFixed.Abs(), MinFixed},
		{"1.5 × 2", FixedFromFloat(1.5).Mul(FixedFromFloat(2)), FixedFromFloat(3)},
		{"−1 LSB × 1 LSB floors to −1 LSB", (-lsb).Mul(lsb), -lsb},
		{"1 LSB × 1 LSB floors to 0", lsb.Mul(lsb), 0},
		{"−1.5 × 1.5", FixedFromFloat(-1.5).Mul(FixedFromFloat(1.5)), FixedFromFloat(-2.25)},
		{"mul keeps bits 8..39", MaxFixed.Mul(MaxFixed), -0x1000000}, // (2^62−2^32+1)>>8 = 2^54−2^24
		{"INT32_MIN × INT32_MIN", MinFixed.Mul(MinFixed), 0},         // 2^62>>8 = 2^54
		{"7 / 2", FixedFromInt(7).Div(FixedFromInt(2)), FixedFromFloat(3.5)},
		{"−7 / 2 truncates toward zero", FixedFromInt(-7).Div(FixedFromInt(2)), FixedFromFloat(-3.5)},
		{"1 / −3", One.Div(FixedFromInt(-3)), -Fixed(256 / 3)},
		{"−1 LSB / 2 truncates to 0", (-lsb).Div(FixedFromInt(2)), 0},
		{"x / 0 for positive x", One.Div(0), MaxFixed},
		{"0 / 0", Fixed(0).Div(0), MaxFixed},
		{"x / 0 for negative x", (-lsb).Div(0), MinFixed},
		{"INT32_MIN / −1 LSB wraps", MinFixed.Div(-lsb), 0}, // 2^39 truncated to 32 bits
		{"INT32_MIN / 1", MinFixed.Div(One), MinFixed},
		{"INT32_MAX / INT32_MAX", MaxFixed.Div(MaxFixed), One},
		{"min2 signed", Min2(-lsb, lsb), -lsb},
		{"max2 signed", Max2(MinFixed, MaxFixed), MaxFixed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %#x (%v), want %#x (%v)", uint32(tt.got), tt.got.Float64(), uint32(tt.want), tt.want.Float64())
			}
		})
	}
}

// TestFixedMatchesBigIntDefinition checks Mul and Div against D1's definitions computed with
// arbitrary precision on random and edge inputs.
func TestFixedMatchesBigIntDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	edge := []Fixed{0, 1, -1, 2, -2, One, -One, MaxFixed, MinFixed, MaxFixed - 1, MinFixed + 1}
	mod := new(big.Int).Lsh(big.NewInt(1), 32)
	wrap := func(z *big.Int) Fixed {
		z.Mod(z, mod)
		return Fixed(int32(uint32(z.Uint64())))
	}
	for i := range 20000 {
		a, b := Fixed(rng.Uint32()), Fixed(rng.Uint32())
		if i < len(edge)*len(edge) {
			a, b = edge[i/len(edge)], edge[i%len(edge)]
		}
		p := new(big.Int).Mul(big.NewInt(int64(a)), big.NewInt(int64(b)))
		p.Rsh(p, 8) // big.Int Rsh floors, like an arithmetic shift
		if got, want := a.Mul(b), wrap(p); got != want {
			t.Fatalf("%d × %d = %d, definition %d", a, b, got, want)
		}
		if b == 0 {
			continue
		}
		n := new(big.Int).Lsh(new(big.Int).Abs(big.NewInt(int64(a))), 8)
		q := new(big.Int).Quo(n, new(big.Int).Abs(big.NewInt(int64(b))))
		q.Mod(q, mod)
		if (a < 0) != (b < 0) {
			q.Neg(q)
		}
		if got, want := a.Div(b), wrap(q); got != want {
			t.Fatalf("%d / %d = %d, definition %d", a, b, got, want)
		}
	}
}

func TestFixedFromFloat(t *testing.T) {
	tests := []struct {
		in   float64
		want Fixed
	}{
		{0, 0}, {1, One}, {-1, -One}, {0.5, 128}, {1.0 / 256, 1}, {-1.0 / 512, -1},
		{1e12, MaxFixed}, {-1e12, MinFixed}, {math.NaN(), 0},
	}
	for _, tt := range tests {
		if got := FixedFromFloat(tt.in); got != tt.want {
			t.Errorf("FixedFromFloat(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
