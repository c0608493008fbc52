package okvs_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// detRand is a deterministic io.Reader for reproducible tests.
func detRand(seed uint64) *mrand.ChaCha8 {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	return mrand.NewChaCha8(s)
}

// randomPairs returns n distinct 32-byte keys (Mohito's ephemeral ids) and n values of l bytes.
func randomPairs(r *mrand.ChaCha8, n, l int) (keys, values [][]byte) {
	kb := make([]byte, n*32)
	vb := make([]byte, n*l)
	r.Read(kb)
	r.Read(vb)
	keys = make([][]byte, n)
	values = make([][]byte, n)
	for i := range n {
		keys[i] = kb[i*32 : i*32+32 : i*32+32]
		values[i] = vb[i*l : i*l+l : i*l+l]
	}
	return keys, values
}

func encode(t testing.TB, keys, values [][]byte, l int, r *mrand.ChaCha8) *okvs.Table {
	t.Helper()
	tab, err := okvs.EncodeWithSize(keys, values, l, r)
	if err != nil {
		t.Fatalf("EncodeWithSize(n=%d, ℓ=%d): %v", len(keys), l, err)
	}
	return tab
}

func checkDecodes(t *testing.T, tab *okvs.Table, keys, values [][]byte) {
	t.Helper()
	l := tab.ValueSize()
	var buf []byte
	for i, k := range keys {
		buf = tab.Decode(buf[:0], k)
		if !bytes.Equal(buf, values[i]) {
			t.Fatalf("Decode(keys[%d]) != values[%d]", i, i)
		}
	}
	prefix := []byte("prefix")
	batch := tab.DecodeBatch(prefix, keys)
	if len(batch) != len(prefix)+len(keys)*l || !bytes.Equal(batch[:len(prefix)], prefix) {
		t.Fatalf("DecodeBatch appended %d bytes, want %d", len(batch)-len(prefix), len(keys)*l)
	}
	for i := range keys {
		if !bytes.Equal(batch[len(prefix)+i*l:len(prefix)+i*l+l], values[i]) {
			t.Fatalf("DecodeBatch: slot %d != values[%d]", i, i)
		}
	}
}

func TestEncodeDecodeProperty(t *testing.T) {
	r := detRand(1)
	sizes := []int{0, 1, 2, 3, 5, 8, 17, 100, 333, 1000, 10000}
	for _, l := range []int{16, 32, 1024, 4096} {
		for _, n := range sizes {
			if testing.Short() && n*l > 1<<22 || n*l > 1<<25 {
				continue
			}
			t.Run(fmt.Sprintf("n=%d/l=%d", n, l), func(t *testing.T) {
				keys, values := randomPairs(r, n, l)
				tab := encode(t, keys, values, l, r)
				if tab.ValueSize() != l {
					t.Errorf("ValueSize() = %d, want %d", tab.ValueSize(), l)
				}
				if want := int(math.Ceil(2.4*float64(n))) + okvs.Lambda + okvs.DenseSlack + ceilLog2(n); tab.Len() != want {
					t.Errorf("Len() = %d, want %d", tab.Len(), want)
				}
				checkDecodes(t, tab, keys, values)

				b, err := tab.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if len(b) != okvs.EncodedSize(n, l) {
					t.Fatalf("len(MarshalBinary()) = %d, EncodedSize = %d", len(b), okvs.EncodedSize(n, l))
				}
				var back okvs.Table
				if err := back.UnmarshalBinary(b); err != nil {
					t.Fatalf("UnmarshalBinary: %v", err)
				}
				checkDecodes(t, &back, keys, values)
				// A non-key decodes identically in both, too: the copy is the same table.
				nonKey := []byte("not a key")
				if !bytes.Equal(tab.Decode(nil, nonKey), back.Decode(nil, nonKey)) {
					t.Fatal("round trip changed a non-key's value")
				}
				b2, _ := back.MarshalBinary()
				if !bytes.Equal(b, b2) {
					t.Fatal("MarshalBinary(UnmarshalBinary(b)) != b")
				}
				var w bytes.Buffer
				if k, err := tab.WriteTo(&w); err != nil || k != int64(len(b)) || !bytes.Equal(w.Bytes(), b) {
					t.Fatalf("WriteTo wrote %d bytes (err %v), not the MarshalBinary encoding", k, err)
				}
				if a, _ := tab.AppendBinary([]byte("x")); !bytes.Equal(a[1:], b) || a[0] != 'x' {
					t.Fatal("AppendBinary differs from MarshalBinary")
				}
			})
		}
	}
}

func ceilLog2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// Keys of any length work, including empty and long ones (the latter take the heap hashing path).
func TestKeyLengths(t *testing.T) {
	r := detRand(2)
	var keys, values [][]byte
	for _, kl := range []int{0, 1, 15, 16, 17, 32, 239, 240, 241, 1000} {
		k := make([]byte, kl)
		r.Read(k)
		v := make([]byte, 48)
		r.Read(v)
		keys, values = append(keys, k), append(values, v)
	}
	tab, err := okvs.Encode(keys, values, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	checkDecodes(t, tab, keys, values)
}

func TestEncodedSizeDependsOnlyOnN(t *testing.T) {
	for _, n := range []int{0, 1, 2, 1000, 100000, okvs.MaxPairs} {
		for _, l := range []int{okvs.MinValueSize, 1024, okvs.MaxValueSize} {
			p := 2.4 * float64(n)
			want64 := 32 + int64(int(math.Ceil(p))+okvs.DenseSlack+ceilLog2(n)+okvs.Lambda)*int64(l)
			want := -1 // the size does not fit an int (32-bit platforms)
			if want64 <= math.MaxInt {
				want = int(want64)
			}
			if got := okvs.EncodedSize(n, l); got != want {
				t.Errorf("EncodedSize(%d, %d) = %d, want %d", n, l, got, want)
			}
		}
	}
	for _, c := range [][2]int{{-1, 32}, {okvs.MaxPairs + 1, 32}, {10, 15}, {10, 4097}, {10, 0}} {
		if got := okvs.EncodedSize(c[0], c[1]); got != -1 {
			t.Errorf("EncodedSize(%d, %d) = %d, want -1", c[0], c[1], got)
		}
	}
}

// bitBalance decodes count non-keys and returns the largest |z-score| of the number of ones,
// over all bits together and over each bit position of the value separately.
func bitBalance(tab *okvs.Table, count int, r *mrand.ChaCha8) (float64, float64) {
	l := tab.ValueSize()
	ones := make([]int, l*8)
	key := make([]byte, 32)
	var buf []byte
	for range count {
		r.Read(key)
		buf = tab.Decode(buf[:0], key)
		for i, c := range buf {
			for j := range 8 {
				ones[i*8+j] += int(c >> j & 1)
			}
		}
	}
	total, worst := 0, 0.0
	for _, o := range ones {
		total += o
		worst = max(worst, math.Abs(float64(o)-float64(count)/2)/math.Sqrt(float64(count)/4))
	}
	bitsN := float64(count * l * 8)
	all := math.Abs(float64(total)-bitsN/2) / math.Sqrt(bitsN/4)
	return all, worst
}

// Non-members must decode to uniform-looking bytes (spec §4.1, §9.2 item 9): this is the
// property zero-filled cells would break, and it must hold whether the table is empty, sparse
// or full of structured (here: all-zero) values.
func TestNonKeysLookUniform(t *testing.T) {
	r := detRand(3)
	for _, n := range []int{0, 1, 1000} {
		keys, _ := randomPairs(r, n, 32)
		zeros := make([][]byte, n)
		for i := range zeros {
			zeros[i] = make([]byte, 32)
		}
		tab := encode(t, keys, zeros, 32, r)
		// 256 bit positions: a 6σ bound per position is a false-alarm rate of ~5e-7 in total.
		all, worst := bitBalance(tab, 8000, r)
		if all > 6 || worst > 6 {
			t.Errorf("n=%d: non-key bits unbalanced: overall z = %.2f, worst position z = %.2f", n, all, worst)
		}
		b, _ := tab.MarshalBinary()
		cells := b[32:]
		for i := 0; i < len(cells); i += 32 {
			if bytes.Equal(cells[i:i+32], make([]byte, 32)) {
				t.Errorf("n=%d: cell %d is all zero", n, i/32)
			}
		}
	}
}

func TestFreshRandomnessChangesNonKeys(t *testing.T) {
	r := detRand(4)
	keys, values := randomPairs(r, 500, 64)
	a := encode(t, keys, values, 64, detRand(100))
	b := encode(t, keys, values, 64, detRand(101))
	checkDecodes(t, a, keys, values)
	checkDecodes(t, b, keys, values)
	same := 0
	for i := range 100 {
		k := []byte(fmt.Sprintf("non-key %d", i))
		if bytes.Equal(a.Decode(nil, k), b.Decode(nil, k)) {
			same++
		}
	}
	if same != 0 {
		t.Errorf("%d of 100 non-keys decode equally in two independently randomized tables", same)
	}
	ma, _ := a.MarshalBinary()
	mb, _ := b.MarshalBinary()
	if bytes.Equal(ma[16:32], mb[16:32]) {
		t.Error("two encodings share a seed")
	}
}

func TestDuplicateKeys(t *testing.T) {
	r := detRand(5)
	for _, c := range []struct {
		n    int
		dups [][2]int // keys[b] = keys[a]
	}{
		{2, [][2]int{{0, 1}}},
		{1000, [][2]int{{10, 900}}},
		{1000, [][2]int{{1, 2}, {3, 4}, {5, 6}}},
		{5000, nil}, // every key equal to keys[0]
	} {
		keys, values := randomPairs(r, c.n, 32)
		if c.dups == nil {
			for i := range keys {
				keys[i] = keys[0]
			}
		}
		for _, d := range c.dups {
			keys[d[1]] = bytes.Clone(keys[d[0]])
		}
		// Equal values too: a duplicate must be rejected even when it would be consistent.
		for _, d := range c.dups {
			values[d[1]] = values[d[0]]
		}
		_, err := okvs.Encode(keys, values, r)
		if !errors.Is(err, okvs.ErrDuplicateKey) {
			t.Errorf("n=%d dups=%v: err = %v, want ErrDuplicateKey", c.n, c.dups, err)
		}
	}
}

func TestBadSizes(t *testing.T) {
	r := detRand(6)
	keys, values := randomPairs(r, 10, 32)
	mixed := append([][]byte{}, values...)
	mixed[7] = make([]byte, 33)
	short := make([][]byte, 10)
	long := make([][]byte, 10)
	for i := range short {
		short[i] = make([]byte, okvs.MinValueSize-1)
		long[i] = make([]byte, okvs.MaxValueSize+1)
	}
	for name, c := range map[string]struct {
		keys, values [][]byte
	}{
		"mixed lengths":    {keys, mixed},
		"too short":        {keys, short},
		"too long":         {keys, long},
		"fewer values":     {keys, values[:9]},
		"fewer keys":       {keys[:9], values},
		"no pairs unsized": {nil, nil},
	} {
		if _, err := okvs.Encode(c.keys, c.values, r); err == nil {
			t.Errorf("%s: Encode succeeded", name)
		}
	}
	if _, err := okvs.EncodeWithSize(keys, values, 64, r); err == nil {
		t.Error("EncodeWithSize with the wrong size succeeded")
	}
	for _, l := range []int{0, okvs.MinValueSize - 1, okvs.MaxValueSize + 1} {
		if _, err := okvs.EncodeWithSize(nil, nil, l, r); err == nil {
			t.Errorf("EncodeWithSize(n=0, ℓ=%d) succeeded", l)
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

func TestRandFailure(t *testing.T) {
	keys, values := randomPairs(detRand(7), 10, 32)
	if _, err := okvs.Encode(keys, values, failingReader{}); err == nil {
		t.Fatal("Encode succeeded with a failing rand")
	}
}

func TestUnmarshalMalformed(t *testing.T) {
	r := detRand(8)
	keys, values := randomPairs(r, 3, 16)
	tab := encode(t, keys, values, 16, r)
	good, _ := tab.MarshalBinary()

	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	be32 := func(b []byte, off int, v uint32) []byte {
		b[off], b[off+1], b[off+2], b[off+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		return b
	}
	cases := map[string][]byte{
		"empty":         nil,
		"header only":   good[:32],
		"one byte more": append(bytes.Clone(good), 0),
		"magic":         mutate(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version 0":     mutate(func(b []byte) []byte { b[4] = 0; return b }),
		"version 2":     mutate(func(b []byte) []byte { b[4] = 2; return b }),
		"lambda":        mutate(func(b []byte) []byte { b[5] = 39; return b }),
		"reserved":      mutate(func(b []byte) []byte { b[7] = 1; return b }),
		"n+1":           mutate(func(b []byte) []byte { return be32(b, 8, 4) }),
		"n max":         mutate(func(b []byte) []byte { return be32(b, 8, okvs.MaxPairs) }),
		"n too big":     mutate(func(b []byte) []byte { return be32(b, 8, okvs.MaxPairs+1) }),
		"n 2^32-1":      mutate(func(b []byte) []byte { return be32(b, 8, math.MaxUint32) }),
		"value 0":       mutate(func(b []byte) []byte { return be32(b, 12, 0) }),
		"value 15":      mutate(func(b []byte) []byte { return be32(b, 12, 15) }),
		"value 4097":    mutate(func(b []byte) []byte { return be32(b, 12, 4097) }),
		"value 2^32-1":  mutate(func(b []byte) []byte { return be32(b, 12, math.MaxUint32) }),
		"value 32":      mutate(func(b []byte) []byte { return be32(b, 12, 32) }),
	}
	for i := range len(good) {
		cases[fmt.Sprintf("truncated to %d", i)] = good[:i]
	}
	for name, b := range cases {
		var got okvs.Table
		if err := got.UnmarshalBinary(b); !errors.Is(err, okvs.ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}

	// A failed UnmarshalBinary leaves the table as it was.
	back := *tab
	if err := back.UnmarshalBinary(good[:40]); err == nil {
		t.Fatal("truncated input accepted")
	}
	checkDecodes(t, &back, keys, values)
}

// A 32-byte header claiming the largest table must be rejected without allocating it.
func TestUnmarshalHugeHeaderDoesNotAllocate(t *testing.T) {
	keys, values := randomPairs(detRand(9), 1, 4096)
	tab := encode(t, keys, values, 4096, detRand(10))
	b, _ := tab.MarshalBinary()
	b = b[:32]
	binary.BigEndian.PutUint32(b[8:], okvs.MaxPairs)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		var got okvs.Table
		if err := got.UnmarshalBinary(b); !errors.Is(err, okvs.ErrMalformed) {
			t.Fatalf("err = %v, want ErrMalformed", err)
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("100 rejected headers allocated %d bytes", d)
	}
}

func TestZeroTable(t *testing.T) {
	var tab okvs.Table
	if _, err := tab.MarshalBinary(); err == nil {
		t.Error("MarshalBinary of a zero Table succeeded")
	}
	if got := tab.Decode([]byte("x"), []byte("key")); string(got) != "x" {
		t.Errorf("Decode on a zero Table appended %q", got)
	}
	if tab.Len() != 0 || tab.ValueSize() != 0 {
		t.Error("zero Table has cells")
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	r := detRand(11)
	keys, values := randomPairs(r, 1000, 1024)
	tab := encode(t, keys, values, 1024, r)
	buf := make([]byte, 0, 1024)
	if a := testing.AllocsPerRun(100, func() { buf = tab.Decode(buf[:0], keys[3]) }); a != 0 {
		t.Errorf("Decode allocates %.1f times", a)
	}
	batch := make([]byte, 0, len(keys)*1024)
	if a := testing.AllocsPerRun(10, func() { batch = tab.DecodeBatch(batch[:0], keys) }); a != 0 {
		t.Errorf("DecodeBatch allocates %.1f times", a)
	}
}

// Spec §9.1 item 3 asks for n up to 10⁶.
func TestMillionPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("10⁶ pairs in -short mode")
	}
	r := detRand(12)
	keys, values := randomPairs(r, 1_000_000, 32)
	tab := encode(t, keys, values, 32, r)
	got := tab.DecodeBatch(nil, keys)
	for i := range keys {
		if !bytes.Equal(got[i*32:i*32+32], values[i]) {
			t.Fatalf("keys[%d] decodes wrongly", i)
		}
	}
}

// A Table is read-only after Encode, so concurrent decoders need no locking (run with -race).
func TestConcurrentDecode(t *testing.T) {
	r := detRand(13)
	keys, values := randomPairs(r, 2000, 64)
	tab := encode(t, keys, values, 64, r)
	want := tab.DecodeBatch(nil, keys)
	done := make(chan []byte)
	for g := range 4 {
		go func() {
			if g%2 == 0 {
				done <- tab.DecodeBatch(nil, keys)
				return
			}
			var out []byte
			for _, k := range keys {
				out = tab.Decode(out, k)
			}
			done <- out
		}()
	}
	for range 4 {
		if got := <-done; !bytes.Equal(got, want) {
			t.Error("concurrent decode disagrees")
		}
	}
}
