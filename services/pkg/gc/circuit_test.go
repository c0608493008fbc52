package gc_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

func readBristolFile(t testing.TB, name string) *gc.Circuit {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := gc.ReadBristol(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return c
}

func TestReadBristolFiles(t *testing.T) {
	for _, tc := range []struct {
		file            string
		wires, and, xor int
		in, out         []int
	}{
		{"aes_128.txt", 36919, 6400, 28176, []int{128, 128}, []int{128}},
		{"sha256.txt", 135841, 22573, 110644, []int{512, 256}, []int{256}},
	} {
		c := readBristolFile(t, tc.file)
		if c.Wires != tc.wires || c.ANDCount() != tc.and || c.XORCount() != tc.xor {
			t.Errorf("%s: wires %d AND %d XOR %d, want %d %d %d", tc.file, c.Wires, c.ANDCount(), c.XORCount(), tc.wires, tc.and, tc.xor)
		}
		var buf bytes.Buffer
		if err := gc.WriteBristol(&buf, c); err != nil {
			t.Fatal(err)
		}
		c2, err := gc.ReadBristol(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if c.Hash() != c2.Hash() {
			t.Errorf("%s: write/read round trip changed the circuit", tc.file)
		}
	}
}

func TestReadBristolRejects(t *testing.T) {
	for name, src := range map[string]string{
		"empty":           "",
		"use before def":  "1 3\n1 1\n1 1\n\n2 1 0 1 2 AND\n",
		"out of range":    "1 3\n1 2\n1 1\n\n2 1 0 5 2 AND\n",
		"defined twice":   "2 3\n1 2\n1 1\n\n2 1 0 1 2 AND\n2 1 0 1 2 XOR\n",
		"input redefined": "1 3\n1 2\n1 1\n\n2 1 0 1 1 AND\n",
		"bad op":          "1 3\n1 2\n1 1\n\n2 1 0 1 2 NAND\n",
		"bad const":       "1 2\n1 1\n1 1\n\n1 1 2 1 EQ\n",
		"huge wires":      "0 4000000000\n1 2\n1 1\n",
		"trailing":        "1 3\n1 2\n1 1\n\n2 1 0 1 2 AND\nX\n",
		"truncated":       "2 4\n1 2\n1 1\n\n2 1 0 1 2 AND\n",
		"zero width":      "1 3\n2 2 0\n1 1\n\n2 1 0 1 2 AND\n",
		"negative":        "1 3\n1 -2\n1 1\n\n2 1 0 1 2 AND\n",
	} {
		if _, err := gc.ReadBristol(bytes.NewBufferString(src)); !errors.Is(err, gc.ErrInvalidCircuit) {
			t.Errorf("%s: err = %v, want ErrInvalidCircuit", name, err)
		}
	}
}

func TestReadBristolMAND(t *testing.T) {
	src := "1 6\n1 4\n1 1\n\n4 2 0 1 2 3 4 5 MAND\n"
	c, err := gc.ReadBristol(bytes.NewBufferString(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.ANDCount() != 2 || c.Gates[0] != (gc.Gate{A: 0, B: 2, Out: 4, Op: gc.AND}) {
		t.Fatalf("MAND expanded to %v", c.Gates)
	}
}

func TestBuilder(t *testing.T) {
	b := gc.NewBuilder()
	x := b.Input(2)
	one := b.Const(true)
	y := b.Input(1) // declared after gates: renumbered to come after x
	or := b.OR(x[0], x[1])
	b.Output(b.AND(or, y[0]), b.NOT(or), b.XOR(one, x[0]), b.MUX(y[0], x[0], x[1]))
	c, err := b.Circuit()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Inputs; len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("inputs %v", got)
	}
	for v := range 8 {
		x0, x1, y0 := v&1 == 1, v&2 == 2, v&4 == 4
		out, err := c.Eval([]bool{x0, x1, y0})
		if err != nil {
			t.Fatal(err)
		}
		mux := x0
		if y0 {
			mux = x1
		}
		want := []bool{(x0 || x1) && y0, !(x0 || x1), !x0, mux}
		for j := range want {
			if out[j] != want[j] {
				t.Errorf("input %03b output %d = %v, want %v", v, j, out[j], want[j])
			}
		}
	}
	if c.ANDCount() != 3 {
		t.Errorf("AND count %d, want 3", c.ANDCount())
	}
}
