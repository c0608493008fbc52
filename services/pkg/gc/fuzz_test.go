package gc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// FuzzReadBristol feeds arbitrary text to ReadBristol: it must never panic, must reject with
// ErrInvalidCircuit (the reader here never fails), and what it accepts must be a valid
// circuit that survives a WriteBristol/ReadBristol round trip unchanged.
func FuzzReadBristol(f *testing.F) {
	f.Add([]byte("1 3\n1 2\n1 1\n\n2 1 0 1 2 AND\n"))
	f.Add([]byte("1 6\n1 4\n1 1\n\n4 2 0 1 2 3 4 5 MAND\n"))
	f.Add([]byte("3 4\n1 1\n1 1\n\n1 1 1 1 EQ\n2 1 0 1 2 XOR\n1 1 2 3 INV\n"))
	if b, err := os.ReadFile("testdata/aes_128.txt"); err == nil {
		f.Add(b[:4096])
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := gc.ReadBristol(bytes.NewReader(src))
		if err != nil {
			if !errors.Is(err, gc.ErrInvalidCircuit) {
				t.Fatalf("error does not wrap ErrInvalidCircuit: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid circuit: %v", err)
		}
		var buf bytes.Buffer
		if err := gc.WriteBristol(&buf, c); err != nil {
			t.Fatal(err)
		}
		c2, err := gc.ReadBristol(&buf)
		if err != nil {
			t.Fatalf("re-read: %v", err)
		}
		if c.Hash() != c2.Hash() {
			t.Fatal("round trip changed the circuit")
		}
	})
}

// FuzzStream feeds arbitrary bytes to Evaluate as a garbled stream for a fixed small circuit:
// it must never panic, and every error must wrap ErrMalformed or ErrCircuitMismatch (the
// reader here never fails). Accepted streams (valid ones, or with tables changed) only give
// some output bits.
func FuzzStream(f *testing.F) {
	c := randomCircuit(11, 12, 150)
	p, err := gc.Compile(c)
	if err != nil {
		f.Fatal(err)
	}
	bits := make([]bool, c.NumInputWires())
	in, labels := publisherInputs(bits)
	in[3] = gc.Input{Const: true, Bit: true}
	for _, ctxBytes := range [][]byte{nil, []byte("fn=1")} {
		var buf bytes.Buffer
		if _, err := gc.Garble(context.Background(), p, &buf, in, nil, &gc.Options{Context: ctxBytes}); err != nil {
			f.Fatal(err)
		}
		s := buf.Bytes()
		f.Add(s)
		f.Add(s[:len(s)-1])
		f.Add(s[:100])
		f.Add(s[:101])
	}
	f.Add([]byte("OBGC"))
	f.Fuzz(func(t *testing.T, s []byte) {
		res, err := gc.Evaluate(context.Background(), p, bytes.NewReader(s), labels, &gc.Options{ChunkSize: 64})
		if err != nil {
			if !errors.Is(err, gc.ErrMalformed) && !errors.Is(err, gc.ErrCircuitMismatch) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if len(res.Masked) != (p.NumOutputWires()+7)/8 {
			t.Fatalf("%d output bytes", len(res.Masked))
		}
	})
}

// FuzzReadHeader: ReadHeader must never panic and must reject with ErrMalformed.
func FuzzReadHeader(f *testing.F) {
	p, _ := gc.Compile(randomCircuit(1, 2, 5))
	in, _ := publisherInputs(make([]bool, p.NumInputWires()))
	var buf bytes.Buffer
	gc.Garble(context.Background(), p, &buf, in, nil, &gc.Options{Context: []byte("ctx")})
	f.Add(buf.Bytes()[:103])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, s []byte) {
		if _, err := gc.ReadHeader(bytes.NewReader(s)); err != nil && !errors.Is(err, gc.ErrMalformed) {
			t.Fatalf("unexpected error: %v", err)
		}
	})
}

// FuzzPregarbledStreams feeds arbitrary bytes to ReadTables and EvaluatePregarbled as a
// pregarbled execution's tables and inputs streams for a fixed small circuit: they must never
// panic, and every error must wrap ErrMalformed or ErrCircuitMismatch.
func FuzzPregarbledStreams(f *testing.F) {
	c := randomCircuit(11, 12, 150)
	p, err := gc.Compile(c)
	if err != nil {
		f.Fatal(err)
	}
	bits := make([]bool, c.NumInputWires())
	in, labels := publisherInputs(bits)
	in[3] = gc.Input{Const: true, Bit: true}
	var tabs, ins bytes.Buffer
	pg, err := gc.Pregarble(context.Background(), p, &tabs, nil)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := pg.Garble(context.Background(), &ins, in, nil, &gc.Options{Context: []byte("fn=1")}); err != nil {
		f.Fatal(err)
	}
	ts, is := tabs.Bytes(), ins.Bytes()
	f.Add(ts, is)
	f.Add(ts, is[:len(is)-1])
	f.Add(ts[:len(ts)-1], is)
	f.Add(is, ts)
	f.Add([]byte("OBGC"), []byte("OBGC"))
	f.Fuzz(func(t *testing.T, ts, is []byte) {
		ok := func(err error) bool { return errors.Is(err, gc.ErrMalformed) || errors.Is(err, gc.ErrCircuitMismatch) }
		tb, err := gc.ReadTables(p, bytes.NewReader(ts))
		if err != nil {
			if !ok(err) {
				t.Fatalf("read tables: unexpected error: %v", err)
			}
			return
		}
		res, err := gc.EvaluatePregarbled(context.Background(), p, tb, bytes.NewReader(is), labels, &gc.Options{ChunkSize: 64})
		if err != nil {
			if !ok(err) {
				t.Fatalf("evaluate: unexpected error: %v", err)
			}
			return
		}
		if len(res.Masked) != (p.NumOutputWires()+7)/8 {
			t.Fatalf("%d output bytes", len(res.Masked))
		}
	})
}
