package gc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// publisherInputs makes identity inputs for bits: a random publisher label pair per wire
// with different permute bits (spec §8.2), and the label of each bit for the evaluator.
func publisherInputs(bits []bool) ([]gc.Input, []gc.Label) {
	in := make([]gc.Input, len(bits))
	labels := make([]gc.Label, len(bits))
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

// roundTrip garbles p for inputs and labels with a random output mask, evaluates the
// stream and unmasks: C(x) as the subscriber sees it.
func roundTrip(t testing.TB, p *gc.Plan, inputs []gc.Input, labels []gc.Label, opt *gc.Options) []bool {
	t.Helper()
	mask := make([]byte, (p.NumOutputWires()+7)/8)
	rand.Read(mask)
	if r := p.NumOutputWires() % 8; r != 0 {
		mask[len(mask)-1] &= 1<<r - 1
	}
	var buf bytes.Buffer
	if _, err := gc.Garble(context.Background(), p, &buf, inputs, mask, opt); err != nil {
		t.Fatalf("garble: %v", err)
	}
	res, err := gc.Evaluate(context.Background(), p, &buf, labels, opt)
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("evaluate left %d bytes of the stream unread", buf.Len())
	}
	out := make([]bool, p.NumOutputWires())
	for j := range out {
		out[j] = (res.Masked[j/8]^mask[j/8])>>(j%8)&1 == 1
	}
	return out
}

func garbleBits(t testing.TB, p *gc.Plan, bits []bool) []bool {
	in, labels := publisherInputs(bits)
	return roundTrip(t, p, in, labels, nil)
}

// bigEndianBits is the Bristol Fashion crypto circuits' bit order: wire i of a value
// carries bit i of the value read as one big-endian integer, so bit 0 is the least
// significant bit of the last byte.
func bigEndianBits(b []byte) []bool {
	out := make([]bool, 8*len(b))
	for i := range out {
		out[i] = b[len(b)-1-i/8]>>(i%8)&1 == 1
	}
	return out
}

func bitsToBigEndian(bits []bool) []byte {
	b := make([]byte, len(bits)/8)
	for i, v := range bits {
		if v {
			b[len(b)-1-i/8] |= 1 << (i % 8)
		}
	}
	return b
}

func mustCompile(t testing.TB, src gc.GateSource) *gc.Plan {
	t.Helper()
	p, err := gc.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
