package gc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"iter"
	mrand "math/rand/v2"
	"runtime"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// randomCircuit builds a circuit with every gate kind, constants and copies, from seed.
func randomCircuit(seed uint64, nIn, nGates int) *gc.Circuit {
	r := mrand.New(mrand.NewPCG(seed, 7))
	b := gc.NewBuilder()
	var ws []gc.Wire
	for left := nIn; left > 0; {
		w := 1 + r.IntN(left)
		ws = append(ws, b.Input(w)...)
		left -= w
	}
	pick := func() gc.Wire { return ws[r.IntN(len(ws))] }
	for range nGates {
		var w gc.Wire
		switch r.IntN(9) {
		case 0, 1:
			w = b.AND(pick(), pick())
		case 2, 3:
			w = b.XOR(pick(), pick())
		case 4:
			w = b.NOT(pick())
		case 5:
			w = b.OR(pick(), pick())
		case 6:
			w = b.Const(r.IntN(2) == 1)
		case 7:
			x := pick()
			w = b.AND(x, x)
		default:
			w = b.MUX(pick(), pick(), pick())
		}
		ws = append(ws, w)
	}
	for range 1 + r.IntN(3) {
		out := make([]gc.Wire, 1+r.IntN(9))
		for i := range out {
			out[i] = pick()
		}
		b.Output(out...)
	}
	c, err := b.Circuit()
	if err != nil {
		panic(err)
	}
	return c
}

func randomBits(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = mrand.IntN(2) == 1
	}
	return out
}

// TestRandomCircuits: Decode(Eval(Garble(C), labels(x))) ⊕ r = C(x) on random circuits and
// inputs, some wires constant (nullified) and the rest identity gates, with small chunks so
// AND runs straddle chunk boundaries.
func TestRandomCircuits(t *testing.T) {
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
				labels[u] = gc.Label{} // ignored
			}
		}
		want, err := c.Eval(bits)
		if err != nil {
			t.Fatal(err)
		}
		got := roundTrip(t, p, in, labels, &gc.Options{ChunkSize: 32 * (1 + int(seed%5))})
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("seed %d: output bit %d = %v, want %v", seed, j, got[j], want[j])
			}
		}
	}
}

// layered is a GateSource made on the fly: width-bit layers, each computed from the previous
// one by ANDs and XORs (and an INV, EQW and EQ per layer), in a ring of two layers of wires
// that are redefined over and over, so its memory does not grow with its length.
type layered struct {
	nIn, width, layers int
}

func (l layered) Shape() (int, []int, []int, []uint32) {
	wires := l.nIn + 2*l.width
	out := make([]uint32, 8)
	last := l.layerBase(l.layers - 1)
	for j := range out {
		out[j] = uint32(last + j)
	}
	return wires, []int{l.nIn}, []int{len(out)}, out
}

func (l layered) layerBase(i int) int {
	if i < 0 {
		return 0
	}
	return l.nIn + (i%2)*l.width
}

func (l layered) GateChunks() iter.Seq[[]gc.Gate] {
	return func(yield func([]gc.Gate) bool) {
		buf := make([]gc.Gate, 0, l.width)
		for i := range l.layers {
			prev, cur, pw := l.layerBase(i-1), l.layerBase(i), l.width
			if i == 0 {
				pw = l.nIn
			}
			buf = buf[:0]
			for j := range l.width {
				a, b := uint32(prev+j%pw), uint32(prev+(j*7+i+1)%pw)
				g := gc.Gate{A: a, B: b, Out: uint32(cur + j), Op: gc.AND}
				switch {
				case j == 0:
					g = gc.Gate{A: a, Out: g.Out, Op: gc.INV}
				case j == 1:
					g = gc.Gate{A: a, Out: g.Out, Op: gc.EQW}
				case j == 2:
					g = gc.Gate{A: uint32(i % 2), Out: g.Out, Op: gc.EQ}
				case j%4 == 3:
					g.Op = gc.XOR
				}
				buf = append(buf, g)
			}
			if !yield(buf) {
				return
			}
		}
	}
}

func (l layered) eval(in []bool) []bool {
	wires, _, _, outs := l.Shape()
	v := make([]bool, wires)
	copy(v, in)
	for chunk := range l.GateChunks() {
		for _, g := range chunk {
			switch g.Op {
			case gc.AND:
				v[g.Out] = v[g.A] && v[g.B]
			case gc.XOR:
				v[g.Out] = v[g.A] != v[g.B]
			case gc.INV:
				v[g.Out] = !v[g.A]
			case gc.EQW:
				v[g.Out] = v[g.A]
			case gc.EQ:
				v[g.Out] = g.A == 1
			}
		}
	}
	out := make([]bool, len(outs))
	for j, w := range outs {
		out[j] = v[w]
	}
	return out
}

func TestGateSource(t *testing.T) {
	for _, l := range []layered{{nIn: 5, width: 7, layers: 3}, {nIn: 64, width: 100, layers: 50}} {
		p := mustCompile(t, l)
		for range 5 {
			bits := randomBits(l.nIn)
			want := l.eval(bits)
			got := garbleBits(t, p, bits)
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("%+v: output bit %d = %v, want %v", l, j, got[j], want[j])
				}
			}
		}
	}
}

// countingWriter counts bytes on their way to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// TestLargeStream is spec §10 #14: a garbled circuit above 1 GiB (32 MiB under -short)
// streams from Garble to Evaluate through a pipe and evaluates correctly, while the bytes
// allocated stay bounded by the chunk window and the wire labels, far below the stream.
func TestLargeStream(t *testing.T) {
	const width = 4096
	size := int64(1<<30 + 1<<20)
	if testing.Short() {
		size = 32 << 20
	}
	// 3 ANDs per 4 gates of a layer, 32 bytes each.
	l := layered{nIn: 256, width: width, layers: int(size/(32*(3*width/4-4))) + 1}
	p := mustCompile(t, l)
	bits := randomBits(l.nIn)
	in, labels := publisherInputs(bits)
	want := l.eval(bits)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	errc := make(chan error, 1)
	go func() {
		_, err := gc.Garble(context.Background(), p, cw, in, nil, nil)
		pw.CloseWithError(err)
		errc <- err
	}()
	res, err := gc.Evaluate(context.Background(), p, pr, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if cw.n < size {
		t.Fatalf("stream is %d bytes, want more than %d", cw.n, size)
	}
	for j := range want {
		if res.Masked[j/8]>>(j%8)&1 == 1 != want[j] {
			t.Fatalf("output bit %d wrong", j)
		}
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("streamed %d MiB with %d KiB allocated in total", cw.n>>20, alloc>>10)
	if alloc > 4<<20 {
		t.Errorf("allocated %d bytes to stream %d: the stream is not bounded by the chunk window", alloc, cw.n)
	}
}

// TestSizeRegression is spec §10 #16 for the Bristol circuits: AND-gate counts and the
// exact garbled size (header + input kinds + 16 B per identity gate + 32 B per AND +
// decoding bits) are fixed here, so a change to either is a deliberate one.
func TestSizeRegression(t *testing.T) {
	for _, tc := range []struct {
		file      string
		and, free int
		size      int64
	}{
		{"aes_128.txt", 6400, 30263, 100 + 32 + 256*16 + 6400*32 + 16},
		{"sha256.txt", 22573, 112500, 100 + 96 + 768*16 + 22573*32 + 32},
	} {
		c := readBristolFile(t, tc.file)
		p := mustCompile(t, c)
		if a, f := c.Counts(); a != tc.and || f != tc.free || p.ANDCount() != tc.and {
			t.Errorf("%s: %d AND (plan %d), %d free gates; want %d, %d", tc.file, a, p.ANDCount(), f, tc.and, tc.free)
		}
		in, _ := publisherInputs(randomBits(p.NumInputWires()))
		cw := &countingWriter{w: io.Discard}
		if _, err := gc.Garble(context.Background(), p, cw, in, nil, nil); err != nil {
			t.Fatal(err)
		}
		if cw.n != tc.size || gc.StreamSize(p, 0, 0) != tc.size {
			t.Errorf("%s: garbled %d bytes (StreamSize %d), want %d", tc.file, cw.n, gc.StreamSize(p, 0, 0), tc.size)
		}
	}
}

func TestGarbleRejects(t *testing.T) {
	p := mustCompile(t, randomCircuit(3, 4, 20))
	in, labels := publisherInputs(randomBits(4))
	bad := append([]gc.Input(nil), in...)
	bad[2].A1[0] = bad[2].A0[0]
	if _, err := gc.Garble(context.Background(), p, io.Discard, bad, nil, nil); !errors.Is(err, gc.ErrPermuteBits) {
		t.Errorf("equal permute bits: err = %v", err)
	}
	if _, err := gc.Garble(context.Background(), p, io.Discard, in[:3], nil, nil); err == nil {
		t.Error("too few inputs accepted")
	}
	var buf bytes.Buffer
	if _, err := gc.Garble(context.Background(), p, &buf, in, nil, &gc.Options{Context: []byte("fn=7")}); err != nil {
		t.Fatal(err)
	}
	other := mustCompile(t, randomCircuit(4, 4, 20))
	if _, err := gc.Evaluate(context.Background(), other, bytes.NewReader(buf.Bytes()), labels, nil); !errors.Is(err, gc.ErrCircuitMismatch) {
		t.Errorf("other circuit: err = %v", err)
	}
	res, err := gc.Evaluate(context.Background(), p, bytes.NewReader(buf.Bytes()), labels, nil)
	if err != nil || string(res.Header.Context) != "fn=7" {
		t.Errorf("context: %v %q", err, res.Header.Context)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	big := andCircuit(t, 5000)
	bin, _ := publisherInputs(randomBits(big.NumInputWires()))
	if _, err := gc.Garble(ctx, big, io.Discard, bin, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
	_ = rand.Read
}
