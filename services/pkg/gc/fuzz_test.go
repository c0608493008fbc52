package gc_test

import (
	"bytes"
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
