package gc_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// Benchmarks run next to EMP-toolkit's (shared/MEASURED.md; docs/benchmarks.md has the
// figures): go test -run x -bench . -cpu 1 ./pkg/gc/. Garbled tables go to memory, as in
// EMP's figures: memSink keeps the last chunk in a reused buffer.

type memSink struct{ buf []byte }

func (m *memSink) Write(p []byte) (int, error) {
	m.buf = append(m.buf[:0], p...)
	return len(p), nil
}

// andCircuit is nAND independent ANDs over 1024 input wires (AND-depth 1). Every AND is an
// output (its decoding bit is 1/256 of its table): Compile drops gates no output depends on,
// so with one output wire it kept one AND.
func andCircuit(b testing.TB, nAND int) *gc.Plan {
	const nIn = 1024
	r := rand.New(rand.NewPCG(1, 2))
	c := &gc.Circuit{Wires: nIn + nAND, Inputs: []int{nIn}, Outputs: []int{nAND}}
	for i := range nAND {
		a, b := r.IntN(nIn), r.IntN(nIn-1)
		if b >= a {
			b++ // distinct inputs
		}
		c.Gates = append(c.Gates, gc.Gate{A: uint32(a), B: uint32(b), Out: uint32(nIn + i), Op: gc.AND})
		c.OutputWires = append(c.OutputWires, uint32(nIn+i))
	}
	p := mustCompile(b, c)
	if p.ANDCount() != nAND {
		b.Fatalf("%d of %d ANDs compiled", p.ANDCount(), nAND)
	}
	return p
}

type benchCase struct {
	p      *gc.Plan
	inputs []gc.Input
	labels []gc.Label
	stream []byte
}

func newBenchCase(b *testing.B, p *gc.Plan) *benchCase {
	bits := make([]bool, p.NumInputWires())
	for i := range bits {
		bits[i] = rand.IntN(2) == 1
	}
	bc := &benchCase{p: p}
	bc.inputs, bc.labels = publisherInputs(bits)
	var buf bytes.Buffer
	if _, err := gc.Garble(context.Background(), p, &buf, bc.inputs, nil, nil); err != nil {
		b.Fatal(err)
	}
	bc.stream = buf.Bytes()
	return bc
}

func (bc *benchCase) garble(b *testing.B) {
	sink := &memSink{buf: make([]byte, 0, gc.DefaultChunkSize)}
	ctx := context.Background()
	b.SetBytes(int64(len(bc.stream)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := gc.Garble(ctx, bc.p, sink, bc.inputs, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func (bc *benchCase) evaluate(b *testing.B) {
	ctx := context.Background()
	r := bytes.NewReader(bc.stream)
	b.SetBytes(int64(len(bc.stream)))
	b.ResetTimer()
	for b.Loop() {
		r.Reset(bc.stream)
		if _, err := gc.Evaluate(ctx, bc.p, r, bc.labels, nil); err != nil {
			b.Fatal(err)
		}
	}
}

const benchANDs = 1 << 20

func reportANDs(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ANDs/s")
}

// BenchmarkGarbleAND garbles 2^20 independent ANDs per op through Garble (1024 identity
// gates included, 0.1 % of the work).
func BenchmarkGarbleAND(b *testing.B) {
	bc := newBenchCase(b, andCircuit(b, benchANDs))
	bc.garble(b)
	reportANDs(b, benchANDs)
}

func BenchmarkEvaluateAND(b *testing.B) {
	bc := newBenchCase(b, andCircuit(b, benchANDs))
	bc.evaluate(b)
	reportANDs(b, benchANDs)
}

func BenchmarkGarbleAES128(b *testing.B) {
	newBenchCase(b, mustCompile(b, readBristolFile(b, "aes_128.txt"))).garble(b)
}

func BenchmarkEvaluateAES128(b *testing.B) {
	newBenchCase(b, mustCompile(b, readBristolFile(b, "aes_128.txt"))).evaluate(b)
}

func BenchmarkGarbleSHA256(b *testing.B) {
	newBenchCase(b, mustCompile(b, readBristolFile(b, "sha256.txt"))).garble(b)
}

func BenchmarkEvaluateSHA256(b *testing.B) {
	newBenchCase(b, mustCompile(b, readBristolFile(b, "sha256.txt"))).evaluate(b)
}
