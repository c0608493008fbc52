package dsl

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// TestANDCounts records the AND gates of every operation and block (spec §10 #16): a change
// in a block's construction shows up here. Where spec §4.7 gives a design target, the count
// must also stay within it (+10%).
func TestANDCounts(t *testing.T) {
	ops := []struct {
		expr   string
		want   int
		budget int // §4.7 upper target; 0: none given
	}{
		{"(+ a b)", 31, 32},
		{"(- a b)", 31, 32},
		{"(< a b)", 32, 32},
		{"(= a b)", 31, 0},
		{"(mux (< a b) a b)", 64, 64}, // compare + 32-bit MUX
		{"(min2 a b)", 64, 64},
		{"(max2 a b)", 64, 64},
		{"(* a b)", 1489, 2200},
		{"(/ a b)", 2748, 3300},
		{"(neg a)", 30, 0},
		{"(abs a)", 31, 0},
	}
	for _, op := range ops {
		t.Run(op.expr, func(t *testing.T) {
			f := mustCompile(t, `(begin (define a (val "a")) (define b (val "b")) (start-building) `+op.expr+`)`)
			got := f.Circuit.ANDCount()
			if got != op.want {
				t.Errorf("%s: %d AND gates, recorded %d", op.expr, got, op.want)
			}
			if op.budget > 0 && got*10 > op.budget*11 {
				t.Errorf("%s: %d AND gates, over the §4.7 target %d", op.expr, got, op.budget)
			}
		})
	}
	blockCounts := []struct {
		block string
		n     int
		want  int
	}{
		{"sum", 10, 272}, {"sum", 100, 2974}, // carry-save (circuit.sumN); a fold of ripple adders: 279, 3069,
		{"mean", 10, 2338}, {"mean", 100, 5221},
		{"min", 10, 896}, {"min", 100, 9536},
		{"max", 10, 896}, {"max", 100, 9536},
		{"variance", 10, 15942}, {"variance", 100, 126557},
		{"count", 10, 16}, {"count", 100, 194},
		{"argmin", 10, 917}, {"argmax", 100, 10102},
		{"linreg", 10, 39362}, {"linreg", 100, 289868},
		{"r2", 10, 50922}, {"r2", 100, 414533},
	}
	for _, bc := range blockCounts {
		f := mustCompile(t, blockSource(bc.block, bc.n))
		if got := f.Circuit.ANDCount(); got != bc.want {
			t.Errorf("%s over %d: %d AND gates, recorded %d", bc.block, bc.n, got, bc.want)
		}
	}
}

// TestMinWithDeclaredIdentityIsAFold checks that declaring min's identity (D12) removes the
// per-slot masking: min over n values is then exactly n−1 min2 blocks.
func TestMinWithDeclaredIdentityIsAFold(t *testing.T) {
	f := mustCompile(t, `(begin (define w (window "x" 10 max-fixed)) (start-building) (min w))`)
	if got := f.Circuit.ANDCount(); got != 9*64 {
		t.Fatalf("min over 10 with identity max-fixed: %d AND gates, want %d", got, 9*64)
	}
}

// csaANDs is the carry-save sum's AND count for n words without constants: column j < 31
// holds n bits plus the carries of column j−1 and costs ⌈(c_j − 1)/2⌉ ANDs, one carry each.
func csaANDs(n int) int {
	total, carries := 0, 0
	for range pps.ValueBits - 1 {
		c := n + carries
		carries = c / 2 // ⌈(c − 1)/2⌉
		total += carries
	}
	return total
}

// TestCarrySaveSum checks the multi-operand sum (circuit.sumN) used by the sum block: bit
// for bit equal to the model (the fold of wrapping Q24.8 additions) on full-range random
// words, words that overflow, all-ones and constants among the terms, with nullified slots;
// and its AND count is the column count csaANDs — below the (n−1)·31 of a fold of ripple
// adders for every n ≥ 3.
func TestCarrySaveSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 288))
	for _, n := range []int{3, 4, 7, 32, 288} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// With the window's identity declared 0 the slots are not masked (D12): the
			// circuit is the sum alone.
			bare := mustCompile(t, fmt.Sprintf(`(begin (define xs (window "x" %d 0)) (start-building) (sum xs))`, n))
			if got, want := bare.Circuit.ANDCount(), csaANDs(n); got != want {
				t.Errorf("sum over %d words: %d AND gates, carry-save count %d (a ripple fold: %d)", n, got, want, (n-1)*31)
			}
			f := mustCompile(t, blockSource("sum", n))
			if want := csaANDs(n); want >= (n-1)*31 {
				t.Errorf("carry-save over %d words: %d ANDs, not below the fold's %d", n, want, (n-1)*31)
			}
			slots := len(f.Layout.Slots)
			for trial := range 40 {
				values := make([]pps.Fixed, slots)
				nulls := map[int]pps.NullReason{}
				for s := range values {
					switch trial % 4 {
					case 0:
						values[s] = pps.Fixed(rng.Uint32())
					case 1:
						values[s] = -1 // all ones: every carry chain at its longest
					case 2:
						values[s] = pps.MaxFixed - pps.Fixed(rng.IntN(4))
					default:
						values[s] = edgeValues[rng.IntN(len(edgeValues))]
					}
					if trial%5 == 4 && rng.IntN(3) == 0 {
						nulls[s] = pps.Missing
					}
				}
				a, err := pps.Nullify(&f.Layout, nulls)
				if errors.Is(err, pps.ErrInsufficient) {
					continue
				}
				xs, valid := a.ModelInputs(values)
				model, err := f.Model(xs, valid)
				if err != nil {
					t.Fatal(err)
				}
				if got := evalCircuit(t, f, xs, valid); !bytes.Equal(got, model) {
					t.Fatalf("trial %d: circuit %x, model %x", trial, got, model)
				}
			}
		})
	}
	// Constants among the terms are added at compile time into one constant word.
	f := mustCompile(t, `(begin (define a (val "a")) (define b (val "b")) (define c (val "c")) (start-building) (sum (list 5 a -3 b c 1000)))`)
	for trial := range 40 {
		xs := []pps.Fixed{pps.Fixed(rng.Uint32()), pps.Fixed(rng.Uint32()), pps.Fixed(rng.Uint32())}
		if trial == 0 {
			xs = []pps.Fixed{-1, -1, -1}
		}
		valid := []bool{true, true, true}
		model, err := f.Model(xs, valid)
		if err != nil {
			t.Fatal(err)
		}
		if got := evalCircuit(t, f, xs, valid); !bytes.Equal(got, model) {
			t.Fatalf("%v with constants: circuit %x, model %x", xs, got, model)
		}
	}
}
