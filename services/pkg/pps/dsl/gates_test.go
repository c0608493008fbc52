package dsl

import (
	"testing"
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
		{"sum", 10, 279}, {"sum", 100, 3069},
		{"mean", 10, 2345}, {"mean", 100, 5316},
		{"min", 10, 896}, {"min", 100, 9536},
		{"max", 10, 896}, {"max", 100, 9536},
		{"variance", 10, 15956}, {"variance", 100, 126747},
		{"count", 10, 16}, {"count", 100, 194},
		{"argmin", 10, 917}, {"argmax", 100, 10102},
		{"linreg", 10, 39390}, {"linreg", 100, 290248},
		{"r2", 10, 50957}, {"r2", 100, 415008},
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
