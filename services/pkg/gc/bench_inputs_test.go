package gc_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// The input-dependent part of an execution at a Table 2 statistic's shape (9 × 288 values of
// 32 bits: 82,944 input wires, 2^16 ANDs over them, all outputs, one wire in 64 a constant): the full
// stream (Garble, Evaluate: 1-row identity gates and the gates) and the garbled-ahead
// execution's inputs stream (Pregarbled.Garble, EvaluatePregarbled: 2-row identity gates,
// then the held tables). The before/after figure of a change to the identity or stream code.

const (
	benchInputs     = 9 * 288 * 32
	benchInputsANDs = 1 << 16
)

func inputsCase(b *testing.B) (*gc.Plan, []gc.Input, []gc.Label) {
	r := rand.New(rand.NewPCG(3, 4))
	c := &gc.Circuit{Wires: benchInputs + benchInputsANDs, Inputs: []int{benchInputs}, Outputs: []int{benchInputsANDs}}
	for i := range benchInputsANDs {
		c.Gates = append(c.Gates, gc.Gate{A: uint32(r.IntN(benchInputs)), B: uint32(r.IntN(benchInputs)), Out: uint32(benchInputs + i), Op: gc.AND})
		c.OutputWires = append(c.OutputWires, uint32(benchInputs+i)) // every AND is an output: none is pruned
	}
	p := mustCompile(b, c)
	if p.ANDCount() < benchInputsANDs-8 { // a repeated pair of inputs is one gate
		b.Fatalf("%d ANDs compiled, want %d", p.ANDCount(), benchInputsANDs)
	}
	bits := make([]bool, benchInputs)
	for i := range bits {
		bits[i] = r.IntN(2) == 1
	}
	in, labels := publisherInputs(bits)
	for u := 0; u < len(in); u += 64 {
		in[u] = gc.Input{Const: true, Bit: bits[u]}
	}
	return p, in, labels
}

func BenchmarkInputsGarble(b *testing.B) {
	p, in, _ := inputsCase(b)
	sink := &memSink{buf: make([]byte, 0, gc.DefaultChunkSize)}
	for b.Loop() {
		if _, err := gc.Garble(context.Background(), p, sink, in, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInputsEvaluate(b *testing.B) {
	p, in, labels := inputsCase(b)
	var buf bytes.Buffer
	if _, err := gc.Garble(context.Background(), p, &buf, in, nil, nil); err != nil {
		b.Fatal(err)
	}
	stream := buf.Bytes()
	r := bytes.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		if _, err := gc.Evaluate(context.Background(), p, r, labels, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPregarbledInputsGarble times Pregarbled.Garble alone (each op pregarbles a fresh
// execution outside the timer).
func BenchmarkPregarbledInputsGarble(b *testing.B) {
	p, in, _ := inputsCase(b)
	sink := &memSink{buf: make([]byte, 0, gc.DefaultChunkSize)}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pg, err := gc.Pregarble(ctx, p, &memSink{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := pg.Garble(ctx, sink, in, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvaluatePregarbled times EvaluatePregarbled alone: the inputs stream's identity
// gates, then the held tables. prehashed: the labels' identity hashes computed ahead
// (Tables.Prehash on 2 goroutines, outside the timer: the broker does it while the garbler
// works), so the identity gates are one XOR per wire.
func BenchmarkEvaluatePregarbled(b *testing.B) {
	for _, prehash := range []bool{false, true} {
		name := "hashed"
		if prehash {
			name = "prehashed"
		}
		b.Run(name, func(b *testing.B) {
			p, in, labels := inputsCase(b)
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var tabs, inputs bytes.Buffer
				pg, err := gc.Pregarble(ctx, p, &tabs, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := pg.Garble(ctx, &inputs, in, nil, nil); err != nil {
					b.Fatal(err)
				}
				t, err := gc.ReadTables(p, &tabs)
				if err != nil {
					b.Fatal(err)
				}
				if prehash {
					if err := t.Prehash(labels, 2); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if _, err := gc.EvaluatePregarbled(ctx, p, t, &inputs, labels, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrehash times Tables.Prehash of a Table 2 shape's labels on 1 and 2 goroutines.
func BenchmarkPrehash(b *testing.B) {
	p, _, labels := inputsCase(b)
	ctx := context.Background()
	var tabs bytes.Buffer
	pg, err := gc.Pregarble(ctx, p, &tabs, nil)
	if err != nil {
		b.Fatal(err)
	}
	pg.Erase()
	t, err := gc.ReadTables(p, &tabs)
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			for b.Loop() {
				if err := t.Prehash(labels, w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
