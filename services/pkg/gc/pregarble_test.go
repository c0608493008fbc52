package gc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// pregarbledRoundTripPrehash garbles p ahead of its inputs (tables stream), then garbles the
// inputs (inputs stream) with a random output mask, reads the tables, evaluates and
// unmasks, with the evaluator's labels prehashed on workers goroutines (Tables.Prehash)
// before the inputs stream is evaluated (0: not). It checks both streams' sizes.
func pregarbledRoundTripPrehash(t testing.TB, p *gc.Plan, inputs []gc.Input, labels []gc.Label, opt *gc.Options, workers int) []bool {
	t.Helper()
	ctx := context.Background()
	mask := make([]byte, (p.NumOutputWires()+7)/8)
	rand.Read(mask)
	if r := p.NumOutputWires() % 8; r != 0 {
		mask[len(mask)-1] &= 1<<r - 1
	}
	var tabs, ins bytes.Buffer
	pg, err := gc.Pregarble(ctx, p, &tabs, opt)
	if err != nil {
		t.Fatalf("pregarble: %v", err)
	}
	if n := gc.TablesSize(p, 0); int64(tabs.Len()) != n {
		t.Fatalf("tables stream of %d bytes, TablesSize %d", tabs.Len(), n)
	}
	h, err := pg.Garble(ctx, &ins, inputs, mask, opt)
	if err != nil {
		t.Fatalf("garble inputs: %v", err)
	}
	if h.ExecID != pg.ExecID() {
		t.Fatal("inputs stream's execID is not the pregarbled execution's")
	}
	nConst := 0
	for _, in := range inputs {
		if in.Const {
			nConst++
		}
	}
	if n := gc.InputsSize(p, nConst, 0); int64(ins.Len()) != n {
		t.Fatalf("inputs stream of %d bytes, InputsSize %d", ins.Len(), n)
	}
	tb, err := gc.ReadTables(p, &tabs)
	if err != nil {
		t.Fatalf("read tables: %v", err)
	}
	if workers > 0 {
		if err := tb.Prehash(labels, workers); err != nil {
			t.Fatalf("prehash: %v", err)
		}
	}
	res, err := gc.EvaluatePregarbled(ctx, p, tb, &ins, labels, opt)
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if tabs.Len() != 0 || ins.Len() != 0 {
		t.Fatalf("%d and %d bytes of the streams unread", tabs.Len(), ins.Len())
	}
	out := make([]bool, p.NumOutputWires())
	for j := range out {
		out[j] = (res.Masked[j/8]^mask[j/8])>>(j%8)&1 == 1
	}
	return out
}

// TestPregarbledRandomCircuits: C(x) through Pregarble → Pregarbled.Garble → ReadTables →
// EvaluatePregarbled on random circuits and inputs, some wires constant, small chunks.
func TestPregarbledRandomCircuits(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	for seed := range uint64(n) {
		c := randomCircuit(seed, 1+int(seed%40), int(seed%200))
		p := mustCompile(t, c)
		bits := randomBits(c.NumInputWires())
		in, labels := publisherInputs(bits)
		for u := range in {
			if mrand.IntN(4) == 0 {
				in[u] = gc.Input{Const: true, Bit: bits[u]}
				labels[u] = gc.Label{}
			}
		}
		want, err := c.Eval(bits)
		if err != nil {
			t.Fatal(err)
		}
		// Every other circuit with the labels prehashed (Tables.Prehash).
		got := pregarbledRoundTripPrehash(t, p, in, labels, &gc.Options{ChunkSize: 32 * (1 + int(seed%5))}, int(seed%2))
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("seed %d: output bit %d = %v, want %v", seed, j, got[j], want[j])
			}
		}
	}
}

// TestPregarbledOnce: a pregarbled execution garbles its inputs once and its tables are
// evaluated once (ErrUsed after), an erased one not at all, two pregarblings never share an
// execID, and the inputs stream of one execution does not evaluate against another's tables.
func TestPregarbledOnce(t *testing.T) {
	ctx := context.Background()
	c := randomCircuit(7, 16, 120)
	p := mustCompile(t, c)
	bits := randomBits(c.NumInputWires())
	in, labels := publisherInputs(bits)
	var t1, t2, i1, i2 bytes.Buffer
	pg1, err := gc.Pregarble(ctx, p, &t1, nil)
	if err != nil {
		t.Fatal(err)
	}
	pg2, err := gc.Pregarble(ctx, p, &t2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pg1.ExecID() == pg2.ExecID() {
		t.Fatal("two pregarbled executions share an execID")
	}
	if _, err := pg1.Garble(ctx, &i1, in, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pg1.Garble(ctx, &bytes.Buffer{}, in, nil, nil); !errors.Is(err, gc.ErrUsed) {
		t.Fatalf("second Garble of one pregarbled execution: %v, want ErrUsed", err)
	}
	pg2.Erase()
	if _, err := pg2.Garble(ctx, &i2, in, nil, nil); !errors.Is(err, gc.ErrUsed) {
		t.Fatalf("Garble after Erase: %v, want ErrUsed", err)
	}
	tb1, err := gc.ReadTables(p, bytes.NewReader(t1.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tb2, err := gc.ReadTables(p, bytes.NewReader(t2.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.EvaluatePregarbled(ctx, p, tb2, bytes.NewReader(i1.Bytes()), labels, nil); !errors.Is(err, gc.ErrMalformed) {
		t.Fatalf("inputs stream against another execution's tables: %v, want ErrMalformed", err)
	}
	if _, err := gc.EvaluatePregarbled(ctx, p, tb1, bytes.NewReader(i1.Bytes()), labels, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.EvaluatePregarbled(ctx, p, tb1, bytes.NewReader(i1.Bytes()), labels, nil); !errors.Is(err, gc.ErrUsed) {
		t.Fatalf("second evaluation of one execution's tables: %v, want ErrUsed", err)
	}
	// Neither stream evaluates as a whole one, nor the other way round.
	if _, err := gc.Evaluate(ctx, p, bytes.NewReader(t1.Bytes()), labels, nil); !errors.Is(err, gc.ErrMalformed) {
		t.Fatalf("tables stream through Evaluate: %v, want ErrMalformed", err)
	}
	var full bytes.Buffer
	if _, err := gc.Garble(ctx, p, &full, in, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.ReadTables(p, &full); !errors.Is(err, gc.ErrMalformed) {
		t.Fatalf("a whole stream through ReadTables: %v, want ErrMalformed", err)
	}
}

// TestPregarbledPrehash: with the evaluator's labels prehashed (Tables.Prehash) on 1–3
// goroutines, a circuit of 3 × 4,096 + 5 input wires (some constant) evaluates to C(x) with
// chunks that end mid-batch; EvaluatePregarbled given another slice of the same labels
// ignores the hashes and is still right; Prehash refuses labels of the wrong count and
// tables already used.
func TestPregarbledPrehash(t *testing.T) {
	ctx := context.Background()
	c := randomCircuit(11, 3*4096+5, 3000)
	p := mustCompile(t, c)
	bits := randomBits(c.NumInputWires())
	in, labels := publisherInputs(bits)
	for u := 0; u < len(in); u += 7 {
		in[u] = gc.Input{Const: true, Bit: bits[u]}
		labels[u] = gc.Label{}
	}
	want, err := c.Eval(bits)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, got []bool) {
		t.Helper()
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("%s: output bit %d = %v, want %v", name, j, got[j], want[j])
			}
		}
	}
	for _, w := range []int{1, 2, 3} {
		check(fmt.Sprintf("%d workers", w), pregarbledRoundTripPrehash(t, p, in, labels, &gc.Options{ChunkSize: 32 * 1000}, w))
	}

	var tabs, ins bytes.Buffer
	pg, err := gc.Pregarble(ctx, p, &tabs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Garble(ctx, &ins, in, nil, nil); err != nil {
		t.Fatal(err)
	}
	tb, err := gc.ReadTables(p, &tabs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Prehash(labels[1:], 2); err == nil {
		t.Fatal("Prehash of one label too few accepted")
	}
	if err := tb.Prehash(labels, 2); err != nil {
		t.Fatal(err)
	}
	other := slices.Clone(labels)
	res, err := gc.EvaluatePregarbled(ctx, p, tb, &ins, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]bool, len(want))
	for j := range got {
		got[j] = res.Masked[j/8]>>(j%8)&1 == 1
	}
	check("another slice of the labels", got)
	if err := tb.Prehash(labels, 2); !errors.Is(err, gc.ErrUsed) {
		t.Fatalf("Prehash of used tables: %v, want ErrUsed", err)
	}
}
