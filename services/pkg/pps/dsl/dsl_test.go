package dsl

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// The paper's listings, verbatim (spec §4.6).
const listing1 = `(begin
  (define fold
    (lambda (f l)
      (if (equal? (cdr l) ())
          (car l)
          (f (car l) (fold f (cdr l))))))

  (define min
    (lambda (l)
      (fold min2 l)))
)`

const listing2 = `(begin
  (define t1 (val "Campus/CS/112/temp"))
  (define t2 (val "Campus/CS/114/temp"))
  (define t3 (val "Campus/CS/115/temp"))
  (define t4 (val "Campus/CS/221/temp"))
  (define t5 (val "Campus/CS/223/temp"))

  (define temps (list t1 t2 t3 t4 t5))

  (start-building)
  (min temps)
)`

// evalCircuit evaluates f's circuit in the clear (gc.Circuit.Eval) and packs the output
// like Model.
func evalCircuit(t testing.TB, f *Function, values []pps.Fixed, valid []bool) []byte {
	t.Helper()
	in := make([]bool, 0, f.Layout.InputWires())
	for _, v := range values {
		for j := range pps.ValueBits {
			in = append(in, uint32(v)>>j&1 == 1)
		}
	}
	in = append(in, valid...)
	out, err := f.Circuit.Eval(in)
	if err != nil {
		t.Fatal(err)
	}
	o := make([]byte, pps.OutputBytes(len(out)))
	for i, b := range out {
		if b {
			o[i/8] |= 1 << (i % 8)
		}
	}
	return o
}

func mustCompile(t testing.TB, src string) *Function {
	t.Helper()
	f, err := Compile(src)
	if err != nil {
		t.Fatalf("compile %s: %v", src, err)
	}
	return f
}

func TestPaperListingsCompile(t *testing.T) {
	forms, err := Parse(listing1)
	if err != nil || len(forms) != 1 {
		t.Fatalf("Listing 1 does not parse: %v", err)
	}
	if _, err := Compile(listing1); !errors.Is(err, ErrProgram) {
		t.Fatalf("Listing 1 alone defines procedures and reads no input: %v", err)
	}
	topics := []string{"Campus/CS/112/temp", "Campus/CS/114/temp", "Campus/CS/115/temp", "Campus/CS/221/temp", "Campus/CS/223/temp"}
	for name, src := range map[string]string{
		"Listing 2 with the builtin min": listing2,
		"Listing 1 then Listing 2":       listing1 + "\n" + listing2,
	} {
		t.Run(name, func(t *testing.T) {
			f := mustCompile(t, src)
			if len(f.Layout.Slots) != 5 || len(f.Outputs) != 1 || f.Outputs[0] != FixedOutput {
				t.Fatalf("%d slots, outputs %v", len(f.Layout.Slots), f.Outputs)
			}
			for i, s := range f.Layout.Slots {
				if s.Topic != topics[i] || s.Source != pps.Latest {
					t.Errorf("slot %d = %+v, want topic %s", i, s, topics[i])
				}
			}
			temps := []pps.Fixed{pps.FixedFromFloat(21.5), pps.FixedFromFloat(-3.25), pps.FixedFromFloat(19), pps.FixedFromFloat(22), pps.FixedFromFloat(-3)}
			valid := []bool{true, true, true, true, true}
			want := pps.EncodeFixed([]pps.Fixed{pps.FixedFromFloat(-3.25)})
			if got, _ := f.Model(temps, valid); !bytes.Equal(got, want) {
				t.Fatalf("model min = %x, want %x", got, want)
			}
			if got := evalCircuit(t, f, temps, valid); !bytes.Equal(got, want) {
				t.Fatalf("circuit min = %x, want %x", got, want)
			}
		})
	}
}

// edgeValues are D1's edge cases (spec §10 #1).
var edgeValues = []pps.Fixed{0, 1, -1, 2, -2, pps.One, -pps.One, pps.MaxFixed, pps.MinFixed, pps.MaxFixed - 1, pps.MinFixed + 1, 0x100, 0x7FFF00, -0x800000}

func randomPairs(rng *rand.Rand, n int) [][2]pps.Fixed {
	var out [][2]pps.Fixed
	for _, a := range edgeValues {
		for _, b := range edgeValues {
			out = append(out, [2]pps.Fixed{a, b})
		}
	}
	for range n {
		a, b := pps.Fixed(rng.Uint32()), pps.Fixed(rng.Uint32())
		switch rng.IntN(3) { // small magnitudes exercise the fraction bits
		case 0:
			a >>= rng.IntN(31)
		case 1:
			b >>= rng.IntN(31)
		}
		out = append(out, [2]pps.Fixed{a, b})
	}
	return out
}

// TestOperationsBitExact checks every arithmetic operation's circuit against D1's
// definitions in pps.Fixed (not the DSL's model), on edge cases and random inputs.
func TestOperationsBitExact(t *testing.T) {
	b2i := func(b bool) pps.Fixed {
		if b {
			return 1
		}
		return 0
	}
	tests := []struct {
		op   string
		bit  bool
		want func(a, b pps.Fixed) pps.Fixed
	}{
		{"+", false, pps.Fixed.Add},
		{"-", false, pps.Fixed.Sub},
		{"*", false, pps.Fixed.Mul},
		{"/", false, pps.Fixed.Div},
		{"min2", false, pps.Min2},
		{"max2", false, pps.Max2},
		{"<", true, func(a, b pps.Fixed) pps.Fixed { return b2i(a < b) }},
		{"<=", true, func(a, b pps.Fixed) pps.Fixed { return b2i(a <= b) }},
		{">", true, func(a, b pps.Fixed) pps.Fixed { return b2i(a > b) }},
		{"=", true, func(a, b pps.Fixed) pps.Fixed { return b2i(a == b) }},
		{"neg", false, func(a, _ pps.Fixed) pps.Fixed { return a.Neg() }},
		{"abs", false, func(a, _ pps.Fixed) pps.Fixed { return a.Abs() }},
		{"mux", false, func(a, b pps.Fixed) pps.Fixed {
			if a < b {
				return a
			}
			return b
		}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			expr := fmt.Sprintf("(%s a b)", tt.op)
			switch tt.op {
			case "neg", "abs":
				expr = fmt.Sprintf("(%s a)", tt.op)
			case "mux":
				expr = "(mux (< a b) a b)"
			}
			f := mustCompile(t, `(begin (define a (val "a")) (define b (val "b")) (start-building) `+expr+`)`)
			valid := []bool{true, true}
			for _, p := range randomPairs(rng, 400) {
				got := evalCircuit(t, f, p[:], valid)
				model, err := f.Model(p[:], valid)
				if err != nil {
					t.Fatal(err)
				}
				want := tt.want(p[0], p[1])
				var wantBytes []byte
				if tt.bit {
					wantBytes = []byte{byte(want)}
				} else {
					wantBytes = pps.EncodeFixed([]pps.Fixed{want})
				}
				if !bytes.Equal(got, wantBytes) || !bytes.Equal(model, wantBytes) {
					t.Fatalf("(%s %d %d): circuit %x, model %x, D1 %x", tt.op, p[0], p[1], got, model, wantBytes)
				}
			}
		})
	}
}

// blockSource is a program applying a statistics block to n slots.
func blockSource(block string, n int) string {
	var b strings.Builder
	b.WriteString("(begin\n")
	switch block {
	case "linreg", "r2":
		fmt.Fprintf(&b, "(define xs (window \"x\" %d)) (define ys (window \"y\" %d))\n(start-building)\n(%s xs ys))", n, n, block)
	default:
		fmt.Fprintf(&b, "(define xs (window \"x\" %d))\n(start-building)\n(%s xs))", n, block)
	}
	return b.String()
}

var blocks = []string{"sum", "mean", "min", "max", "variance", "count", "argmin", "argmax", "linreg", "r2"}

// TestBlocksCircuitEqualsModel is spec §10 #1 for the builtin blocks: on random Q24.8
// inputs with random nullification, the circuit's output equals the model's bit for bit.
func TestBlocksCircuitEqualsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, block := range blocks {
		for _, n := range []int{1, 2, 5} {
			t.Run(fmt.Sprintf("%s/%d", block, n), func(t *testing.T) {
				f := mustCompile(t, blockSource(block, n))
				slots := len(f.Layout.Slots)
				for trial := range 60 {
					values := make([]pps.Fixed, slots)
					nulls := map[int]pps.NullReason{}
					for s := range values {
						values[s] = pps.Fixed(rng.Uint32()) >> rng.IntN(20)
						if trial%3 == 0 {
							values[s] = edgeValues[rng.IntN(len(edgeValues))]
						}
						if rng.IntN(4) == 0 {
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
						t.Fatalf("inputs %v valid %v: circuit %x, model %x", xs, valid, got, model)
					}
				}
			})
		}
	}
}

// TestBlocksModelMatchesReals checks the model against float arithmetic on values small
// enough not to overflow Q24.8: the blocks compute what their names say, over the valid
// inputs only.
func TestBlocksModelMatchesReals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 12
	compiled := map[string]*Function{}
	for _, b := range []string{"mean", "min", "max", "count", "variance", "linreg", "r2"} {
		compiled[b] = mustCompile(t, blockSource(b, n))
	}
	for trial := range 50 {
		xs, ys := make([]float64, n), make([]float64, n)
		vals := make([]pps.Fixed, 2*n)
		valid := make([]bool, 2*n)
		for i := range n {
			xs[i] = math.Round((rng.Float64()*20-10)*256) / 256
			ys[i] = math.Round((2.5*xs[i]+1+rng.Float64()*4-2)*256) / 256
			vals[i], vals[n+i] = pps.FixedFromFloat(xs[i]), pps.FixedFromFloat(ys[i])
			valid[i], valid[n+i] = true, true
		}
		drop := trial % n // one nullified sample: the blocks must ignore it
		valid[drop], vals[drop] = false, 0
		var sx, sy, cnt float64
		mn, mx := math.Inf(1), math.Inf(-1)
		for i := range n {
			if i == drop {
				continue
			}
			sx, sy, cnt = sx+xs[i], sy+ys[i], cnt+1
			mn, mx = math.Min(mn, xs[i]), math.Max(mx, xs[i])
		}
		mean, my := sx/cnt, sy/cnt
		var vxx, vyy, cxy float64
		for i := range n {
			if i != drop {
				vxx += (xs[i] - mean) * (xs[i] - mean)
				vyy += (ys[i] - my) * (ys[i] - my)
				cxy += (xs[i] - mean) * (ys[i] - my)
			}
		}
		slope := cxy / vxx
		want := map[string][]float64{
			"mean": {mean}, "min": {mn}, "max": {mx}, "count": {cnt}, "variance": {vxx / cnt},
			"linreg": {slope, my - slope*mean}, "r2": {cxy * cxy / (vxx * vyy)},
		}
		tolerance := map[string]float64{"mean": 0.01, "min": 0, "max": 0, "count": 0, "variance": 0.2, "linreg": 0.1, "r2": 0.05}
		for block, w := range want {
			f := compiled[block]
			in, v := vals[:len(f.Layout.Slots)], valid[:len(f.Layout.Slots)]
			o, err := f.Model(in, v)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := f.Decode(o)
			for i := range w {
				if d := math.Abs(got[i].Float64() - w[i]); d > tolerance[block] {
					t.Errorf("trial %d %s[%d] = %v, real %v (|Δ| %v > %v)", trial, block, i, got[i].Float64(), w[i], d, tolerance[block])
				}
			}
		}
	}
}

func TestNullifiedInputsUseDeclaredIdentity(t *testing.T) {
	f := mustCompile(t, `(begin (define a (val "a" 1)) (define b (val "b" 1)) (define c (val "c")) (start-building) (list (* a b) (+ a c)))`)
	if f.Layout.Slots[0].Identity != pps.One || f.Layout.Slots[2].Identity != 0 {
		t.Fatalf("identities %+v", f.Layout.Slots)
	}
	a, err := pps.Nullify(&f.Layout, map[int]pps.NullReason{1: pps.Inconsistent, 2: pps.Missing})
	if err != nil {
		t.Fatal(err)
	}
	xs, valid := a.ModelInputs([]pps.Fixed{pps.FixedFromInt(7), 99, 99})
	o, _ := f.Model(xs, valid)
	got, _ := f.Decode(o)
	if got[0] != pps.FixedFromInt(7) || got[1] != pps.FixedFromInt(7) {
		t.Fatalf("with b (×) and c (+) nullified: %v, want 7 and 7", got)
	}
	if c := evalCircuit(t, f, xs, valid); !bytes.Equal(c, o) {
		t.Fatalf("circuit %x, model %x", c, o)
	}
}

func TestMinInputsAndSlots(t *testing.T) {
	f := mustCompile(t, `(begin (min-inputs 3) (define w (window "lot/1" 4 max-fixed)) (define s (static "dist")) (start-building) (min (cons s w)))`)
	if f.Layout.MinInputs != 3 || len(f.Layout.Slots) != 5 {
		t.Fatalf("minInputs %d, %d slots", f.Layout.MinInputs, len(f.Layout.Slots))
	}
	for i, s := range f.Layout.Slots[:4] {
		if s.Source != pps.Window || s.Lag != i || s.Identity != pps.MaxFixed {
			t.Errorf("window slot %d = %+v", i, s)
		}
	}
	if f.Layout.Slots[4].Source != pps.Static {
		t.Errorf("static slot = %+v", f.Layout.Slots[4])
	}
	if _, err := pps.Nullify(&f.Layout, map[int]pps.NullReason{0: pps.Missing, 1: pps.Missing, 2: pps.Missing}); !errors.Is(err, pps.ErrInsufficient) {
		t.Fatalf("2 valid of minInputs 3: %v", err)
	}
}

func TestFunctionIDIgnoresFormatting(t *testing.T) {
	a := mustCompile(t, listing2)
	b := mustCompile(t, strings.Join(strings.Fields(listing2), " ")+" ; a comment")
	if a.ID != b.ID || len(a.ID) != 32 || a.Circuit.Hash() != b.Circuit.Hash() {
		t.Fatalf("ids %s %s", a.ID, b.ID)
	}
	c := mustCompile(t, strings.Replace(listing2, "112", "113", 1))
	if c.ID == a.ID {
		t.Fatalf("a different topic kept the id")
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      error
	}{
		{"unbalanced", "(begin (val \"a\")", ErrSyntax},
		{"stray paren", ")", ErrSyntax},
		{"empty", "  ; nothing", ErrSyntax},
		{"unterminated string", `(val "a)`, ErrSyntax},
		{"if on a secret", `(begin (define a (val "a")) (if (< a 1) a 2))`, ErrProgram},
		{"undefined", `(begin (foo (val "a")))`, ErrProgram},
		{"arity", `(begin (define f (lambda (x) x)) (f (val "a") 1))`, ErrProgram},
		{"no input", `(+ 1 2)`, ErrProgram},
		{"output is a procedure", `(begin (val "a") car)`, ErrProgram},
		{"car of empty", `(begin (val "a") (car ()))`, ErrProgram},
		{"equal? on secrets", `(begin (define a (val "a")) (equal? a a))`, ErrProgram},
		{"unbounded recursion", `(begin (define f (lambda (x) (f x))) (f (val "a")))`, ErrProgram},
		{"window of a secret size", `(begin (define a (val "a")) (window "b" a))`, ErrProgram},
		{"literal out of range", `(+ (val "a") 9999999)`, ErrProgram},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile(tt.src); !errors.Is(err, tt.want) {
				t.Fatalf("Compile: %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := Compile(strings.Repeat(" ", MaxSourceBytes+1)); !errors.Is(err, ErrSyntax) {
		t.Fatalf("oversized source: %v", err)
	}
	if _, err := Compile(strings.Repeat("(", 10000)); !errors.Is(err, ErrSyntax) {
		t.Fatalf("deep nesting: %v", err)
	}
}

func FuzzCompile(f *testing.F) {
	f.Add(listing1)
	f.Add(listing2)
	f.Add(blockSource("variance", 2))
	f.Add(`(begin (define a (val "a")) (mux (< a 0) (neg a) a))`)
	f.Fuzz(func(t *testing.T, src string) {
		fn, err := Compile(src)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrProgram) {
				t.Fatalf("error outside ErrSyntax/ErrProgram: %v", err)
			}
			return
		}
		if err := fn.Circuit.Validate(); err != nil {
			t.Fatalf("compiled an invalid circuit: %v", err)
		}
	})
}
