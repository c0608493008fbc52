package gc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

func readBristol(t testing.TB, name string) *Circuit {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := ReadBristol(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func identityInputs(bits []bool) ([]Input, []Label) {
	in := make([]Input, len(bits))
	labels := make([]Label, len(bits))
	for u, b := range bits {
		rand.Read(in[u].A0[:])
		rand.Read(in[u].A1[:])
		in[u].A1[0] = in[u].A1[0]&^1 | (in[u].A0[0]&1 ^ 1)
		labels[u] = in[u].A0
		if b {
			labels[u] = in[u].A1
		}
	}
	return in, labels
}

func randBits(n int) []bool {
	b := make([]byte, n)
	rand.Read(b)
	out := make([]bool, n)
	for i := range out {
		out[i] = b[i]&1 == 1
	}
	return out
}

// TestFreshPerExecution is spec §10 #6: lsb(Δ) = 1 and Δ, the π key and execID never
// repeat across executions of one Plan (10⁴ garblings, 10³ under -short).
func TestFreshPerExecution(t *testing.T) {
	b := NewBuilder()
	x := b.Input(2)
	b.Output(b.AND(x[0], x[1]))
	c, _ := b.Circuit()
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	n := 10_000
	if testing.Short() {
		n = 1000
	}
	var deltas []Label
	testHookGarble = func(d Label, _ []Label) { deltas = append(deltas, d) }
	defer func() { testHookGarble = nil }()
	seen := map[[16]byte]bool{}
	in, _ := identityInputs([]bool{true, false})
	for range n {
		h, err := Garble(context.Background(), p, &bytes.Buffer{}, in, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range [][16]byte{h.Key, h.ExecID, deltas[len(deltas)-1]} {
			if seen[v] {
				t.Fatalf("value %x repeated across executions", v)
			}
			seen[v] = true
		}
		if deltas[len(deltas)-1][0]&1 != 1 {
			t.Fatal("lsb(Δ) = 0")
		}
	}
}

// TestEvaluatorView is spec §10 #5 for the engine: the evaluator ends with exactly one
// label per wire, W⁰ or W⁰ ⊕ Δ, and the stream it receives contains neither Δ, nor the
// other label of any wire (so no W¹ of an output either), nor any zero-label of an input:
// outputs decode from the permute bits alone.
func TestEvaluatorView(t *testing.T) {
	p, err := Compile(readBristol(t, "aes_128.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var delta Label
	var w0, x []Label
	testHookGarble = func(d Label, l []Label) { delta, w0 = d, l }
	testHookEvaluate = func(l []Label) { x = l }
	defer func() { testHookGarble, testHookEvaluate = nil, nil }()
	bits := randBits(p.nIn)
	in, labels := identityInputs(bits)
	for u := range 8 { // a few nullified wires
		in[u] = Input{Const: true, Bit: bits[u]}
	}
	var buf bytes.Buffer
	if _, err := Garble(context.Background(), p, &buf, in, nil, nil); err != nil {
		t.Fatal(err)
	}
	stream := append([]byte(nil), buf.Bytes()...)
	if _, err := Evaluate(context.Background(), p, &buf, labels, nil); err != nil {
		t.Fatal(err)
	}
	windows := make(map[Label]bool, len(stream))
	for i := 0; i+16 <= len(stream); i++ {
		windows[Label(stream[i:i+16])] = true
	}
	if windows[delta] {
		t.Fatal("Δ appears in the stream")
	}
	for s := range p.slots - 2 {
		other := xorLabel(x[s], delta)
		switch {
		case x[s] == w0[s]:
		case other == w0[s]:
		default:
			t.Fatalf("slot %d: evaluator label is neither W0 nor W0⊕Δ", s)
		}
		if windows[other] {
			t.Fatalf("slot %d: the inactive label appears in the stream", s)
		}
		if s < p.nIn && !in[s].Const && windows[x[s]] {
			t.Fatalf("input %d: its circuit label appears in the stream in the clear", s)
		}
		if s < p.nIn && (x[s] != w0[s]) != bits[s] {
			t.Fatalf("input %d: evaluator holds the label of the wrong bit", s)
		}
	}
	// The only output data is the decoding bits: lsb(W⁰_j) (no mask here) at the end.
	d := stream[len(stream)-(p.nOut+7)/8:]
	for j, s := range p.outSlots {
		if d[j/8]>>(j%8)&1 != w0[s][0]&1 {
			t.Fatalf("decoding bit %d is not lsb(W0)", j)
		}
	}
}

// TestCrossKernels garbles with one kernel set and evaluates with another (the pure-Go
// fallback against the assembly, both ways) on the FIPS-197 AES vector.
func TestCrossKernels(t *testing.T) {
	p, err := Compile(readBristol(t, "aes_128.txt"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString("000102030405060708090a0b0c0d0e0f")
	pt, _ := hex.DecodeString("00112233445566778899aabbccddeeff")
	want, _ := hex.DecodeString("69c4e0d86a7b0430d8cdb78070b4c55a")
	beBits := func(b []byte) []bool {
		out := make([]bool, 8*len(b))
		for i := range out {
			out[i] = b[len(b)-1-i/8]>>(i%8)&1 == 1
		}
		return out
	}
	in, labels := identityInputs(append(beBits(key), beBits(pt)...))
	for _, gk := range kernelSets() {
		for _, ek := range kernelSets() {
			var buf bytes.Buffer
			withKernels(gk, func() {
				_, err = Garble(context.Background(), p, &buf, in, nil, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			var res *Result
			withKernels(ek, func() {
				res, err = Evaluate(context.Background(), p, &buf, labels, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 16)
			for i := range 128 {
				got[15-i/8] |= (res.Masked[i/8] >> (i % 8) & 1) << (i % 8)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("garble %s, evaluate %s: %x, want %x", gk.name, ek.name, got, want)
			}
		}
	}
}

// TestSlotReuse checks the liveness allocation of label slots (plan.go): the label array is
// far smaller than one slot per gate, input slots are never written by a gate, and no gate
// reads a slot that an earlier gate of its own AND run wrote (the AND kernels load a
// batch's inputs after storing earlier outputs). Correctness of the values is the KATs'.
func TestSlotReuse(t *testing.T) {
	for _, name := range []string{"aes_128.txt", "sha256.txt"} {
		c := readBristol(t, name)
		p, err := Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		if p.slots*4 > c.Wires {
			t.Errorf("%s: %d label slots for %d wires", name, p.slots, c.Wires)
		}
		off := 0
		for _, r := range p.runs {
			written := map[uint32]bool{}
			for i := range r.n {
				a, b, out := p.ops[off+3*i], p.ops[off+3*i+1], p.ops[off+3*i+2]
				if out < uint32(p.nIn) || out == p.zeroSlot || out == p.oneSlot {
					t.Fatalf("%s: a gate writes input or constant slot %d", name, out)
				}
				if r.and && (written[a] || written[b]) {
					t.Fatalf("%s: an AND reads a slot written earlier in its run", name)
				}
				written[out] = true
			}
			off += 3 * r.n
		}
		t.Logf("%s: %d wires, %d label slots", name, c.Wires, p.slots)
	}
}

// TestDeadGatesDropped checks that Compile drops the gates no output depends on (they are
// neither garbled nor sent) and that the circuit still evaluates: out = a ⊕ b beside two dead
// ANDs, one of them reading the other.
func TestDeadGatesDropped(t *testing.T) {
	c := &Circuit{Wires: 5, Inputs: []int{2}, Outputs: []int{1}, OutputWires: []uint32{3}, Gates: []Gate{
		{Op: AND, A: 0, B: 1, Out: 2}, {Op: XOR, A: 0, B: 1, Out: 3}, {Op: AND, A: 2, B: 3, Out: 4}}}
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.ANDCount() != 0 || p.nXOR != 1 {
		t.Fatalf("%d ANDs and %d XORs compiled, want 0 and 1", p.ANDCount(), p.nXOR)
	}
	for v := range 4 {
		bits := []bool{v&1 == 1, v&2 == 2}
		in, labels := identityInputs(bits)
		var buf bytes.Buffer
		if _, err := Garble(context.Background(), p, &buf, in, nil, nil); err != nil {
			t.Fatal(err)
		}
		res, err := Evaluate(context.Background(), p, &buf, labels, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res.Masked[0]&1 == 1, bits[0] != bits[1]; got != want {
			t.Fatalf("inputs %v: got %v, want %v", bits, got, want)
		}
	}
}
