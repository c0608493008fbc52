package okvs_test

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"math/bits"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// Benchmarks for docs/benchmarks-okvs.md. Sizes are the Mohito per-vendor sizes: n up to
// 100k pairs (spec §5: Σ C_v ≥ 100,000) with 1 KiB commands (L_c) or 32-byte values, and the
// issue's 1M × 32 B (a whole round of ids in one table).
var benchSizes = []struct{ n, l int }{
	{1_000, 32}, {10_000, 32}, {100_000, 32}, {1_000_000, 32},
	{1_000, 1024}, {10_000, 1024}, {100_000, 1024},
}

type benchCase struct {
	keys, values [][]byte
	tab          *okvs.Table
}

// benchCases caches inputs and tables: building 100k × 1 KiB inputs dominates setup.
var benchCases = map[[2]int]*benchCase{}

func getBenchCase(b *testing.B, n, l int, withTable bool) *benchCase {
	c := benchCases[[2]int{n, l}]
	if c == nil {
		c = &benchCase{}
		c.keys, c.values = randomPairs(detRand(uint64(n+l)), n, l)
		benchCases[[2]int{n, l}] = c
	}
	if withTable && c.tab == nil {
		tab, err := okvs.Encode(c.keys, c.values, rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		c.tab = tab
	}
	return c
}

func benchName(n, l int) string { return fmt.Sprintf("n=%dk/l=%d", n/1000, l) }

func BenchmarkEncode(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(benchName(s.n, s.l), func(b *testing.B) {
			c := getBenchCase(b, s.n, s.l, false)
			b.SetBytes(int64(s.n * s.l))
			cpu := startCPU()
			for b.Loop() {
				if _, err := okvs.Encode(c.keys, c.values, rand.Reader); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, s.n, "pair")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(s.n), "ns/pair")
		})
	}
}

// BenchmarkDecode is one Decode per op, cycling over the encoded keys in a random order (the
// keys are random, so their cells are too).
func BenchmarkDecode(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(benchName(s.n, s.l), func(b *testing.B) {
			c := getBenchCase(b, s.n, s.l, true)
			buf := make([]byte, 0, s.l)
			i := 0
			cpu := startCPU()
			for b.Loop() {
				buf = c.tab.Decode(buf[:0], c.keys[i])
				if i++; i == len(c.keys) {
					i = 0
				}
			}
			cpu.report(b, 1, "decode")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decodes/s")
		})
	}
}

// BenchmarkDecodeBatch decodes all n keys in one call per op; ns/decode compares with Decode.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(benchName(s.n, s.l), func(b *testing.B) {
			c := getBenchCase(b, s.n, s.l, true)
			buf := make([]byte, 0, s.n*s.l)
			cpu := startCPU()
			for b.Loop() {
				buf = c.tab.DecodeBatch(buf[:0], c.keys)
			}
			cpu.report(b, s.n, "decode")
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(s.n)
			b.ReportMetric(per, "ns/decode")
			b.ReportMetric(1e9/per, "decodes/s")
		})
	}
}

// BenchmarkGatherXOR is the memory-bound reference a decode is compared with: XOR of
// 2 + ⌈(d+λ)/2⌉ rows (as many as an average decode touches) picked uniformly at random from a
// table of the same size as the OKVS, with subtle.XORBytes and no hashing ("random"). A
// PaXoS decode reads only 2 random rows; the rest come from the d + λ dense cells, which stay
// in cache, so "sparse2+dense" gathers exactly that pattern: 2 random rows of the table plus
// random rows of its last d + λ cells. That one is the lower bound for this construction
// with subtle.XORBytes.
func BenchmarkGatherXOR(b *testing.B) {
	for _, pattern := range []string{"random", "sparse2+dense"} {
		for _, s := range benchSizes {
			b.Run(pattern+"/"+benchName(s.n, s.l), func(b *testing.B) {
				cells := okvs.EncodedSize(s.n, s.l) / s.l
				dense := okvs.Lambda + okvs.DenseSlack + bits.Len(uint(s.n-1))
				rows := 2 + (dense+1)/2
				table := make([]byte, cells*s.l)
				rand.Read(table)
				const sets = 1 << 12
				idx := make([]int, sets*rows)
				r := detRand(7)
				for i := range idx {
					if pattern == "random" || i%rows < 2 {
						idx[i] = int(r.Uint64()%uint64(cells)) * s.l
					} else {
						idx[i] = (cells - dense + int(r.Uint64()%uint64(dense))) * s.l
					}
				}
				out := make([]byte, s.l)
				k := 0
				cpu := startCPU()
				for b.Loop() {
					set := idx[k*rows : k*rows+rows]
					subtle.XORBytes(out, table[set[0]:set[0]+s.l], table[set[1]:set[1]+s.l])
					for _, o := range set[2:] {
						subtle.XORBytes(out, out, table[o:o+s.l])
					}
					if k++; k == sets {
						k = 0
					}
				}
				cpu.report(b, 1, "gather")
				b.ReportMetric(float64(rows), "rows/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gathers/s")
			})
		}
	}
}

// BenchmarkHashOnly is a decode whose XOR work is negligible, so it is mostly the per-key
// hashing SHA-256(seed ‖ key) of a 32-byte key.
func BenchmarkHashOnly(b *testing.B) {
	keys, values := randomPairs(detRand(9), 1, okvs.MinValueSize)
	tab, err := okvs.Encode(keys, values, rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	// With n = 1 and ℓ = 16 the table is 51 cells (816 B, all in L1), so Decode is the hash
	// plus about 22 16-byte XORs.
	buf := make([]byte, 0, okvs.MinValueSize)
	cpu := startCPU()
	for b.Loop() {
		buf = tab.Decode(buf[:0], keys[0])
	}
	cpu.report(b, 1, "decode")
}
