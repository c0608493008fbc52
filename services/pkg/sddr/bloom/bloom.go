// Package bloom is SDDR's beacon digest (spec §3.6, Alg. 3): a Bloom filter of M bits laid
// out byte-aligned inside the 240-byte frame, K indices taken as little-endian 32-bit words of
// one SHA-256 digest modulo M ([R] index rule, §7 item 3), and padding that sets K·(N−n)
// uniformly random bits so the filter's load is the same for every advertised-set size n ≤ N
// ([R] §4.3 padding, INV-5). The caller computes the digests (salted, domain-separated H1 in
// package sddr); this package never sees a link value.
package bloom

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// Digest is one H1 output; its first 4·K bytes give the K indices.
type Digest = [32]byte

// MaxK is the number of 32-bit words in one digest (§7 item 3).
const MaxK = 8

// ErrOverCapacity is returned when more real elements are inserted than the padding target N:
// [R] truncates silently, the spec asks for an error (§7 item 16).
var ErrOverCapacity = errors.New("bloom: more elements than the padding target N")

// Params fixes a filter geometry: M bits, K indices per element, padded load N.
type Params struct {
	M int // bits; the filter occupies ceil(M/8) bytes
	K int // 1..MaxK
	N int // padding target
}

// Validate checks the geometry.
func (p Params) Validate() error {
	if p.M < 8 || p.K < 1 || p.K > MaxK || p.N < 1 {
		return fmt.Errorf("bloom params M=%d K=%d N=%d: need M≥8, 1≤K≤%d, N≥1", p.M, p.K, p.N, MaxK)
	}
	return nil
}

// Bytes is the filter size in bytes.
func (p Params) Bytes() int { return (p.M + 7) / 8 }

// FalsePositiveRate is the paper's closed form P_fp = (1 − (1 − 1/M)^{K·N})^K (§4.5): with
// padding the filter always holds N elements' worth of indices.
func (p Params) FalsePositiveRate() float64 {
	return math.Pow(1-math.Pow(1-1/float64(p.M), float64(p.K*p.N)), float64(p.K))
}

// ExpectedPopcount is M·(1 − (1 − 1/M)^{K·N}), the mean number of set bits of a padded filter.
func (p Params) ExpectedPopcount() float64 {
	return float64(p.M) * (1 - math.Pow(1-1/float64(p.M), float64(p.K*p.N)))
}

// Filter is a view over the filter bytes of a frame: bit b lives in byte b>>3 under mask
// 1<<(b&7) (§3.11). It does not own the slice.
type Filter struct {
	p    Params
	bits []byte
	// mod is Lemire's fast-modulo constant ⌈2⁶⁴/M⌉: an index is a 32-bit word mod M, and
	// two multiplications replace the division in the receiver's hot loop (Has is called
	// once per listen id per beacon).
	mod uint64
}

// View wraps b (len ≥ p.Bytes()) as a filter without copying.
func View(p Params, b []byte) Filter {
	return Filter{p: p, bits: b[:p.Bytes()], mod: fastMod(p.M)}
}

func fastMod(m int) uint64 { return ^uint64(0)/uint64(m) + 1 }

// Bits returns the underlying bytes.
func (f Filter) Bits() []byte { return f.bits }

// Clear zeroes the filter.
func (f Filter) Clear() { clear(f.bits) }

// index is LE32(d[4k:4k+4]) mod M (§7 item 3), computed as ((mod·w mod 2⁶⁴)·M) >> 64, which
// equals w mod M for every 32-bit w and M < 2³² (Lemire, Kaser, Kurz 2019).
func (f Filter) index(d *Digest, k int) uint32 {
	w := uint64(binary.LittleEndian.Uint32(d[4*k:]))
	hi, _ := bits.Mul64(f.mod*w, uint64(f.p.M))
	return uint32(hi)
}

// Insert sets the K bits of one element.
func (f Filter) Insert(d *Digest) {
	for k := 0; k < f.p.K; k++ {
		i := f.index(d, k)
		f.bits[i>>3] |= 1 << (i & 7)
	}
}

// Has reports whether all K bits of the element are set: members always answer true (INV-3),
// non-members with probability FalsePositiveRate (INV-4).
func (f Filter) Has(d *Digest) bool {
	for k := 0; k < f.p.K; k++ {
		i := f.index(d, k)
		if f.bits[i>>3]&(1<<(i&7)) == 0 {
			return false
		}
	}
	return true
}

// Popcount is the number of set bits.
func (f Filter) Popcount() int {
	n := 0
	for _, b := range f.bits {
		n += bits.OnesCount8(b)
	}
	return n
}

// Pad sets K·(N−n) bits drawn uniformly from [0, M), duplicates allowed, from r (a CSPRNG in
// production, §7 item 17). It returns the number of draws, which T8 checks. buf is scratch
// space (any size ≥ 4) so the hot path does not allocate.
func (f Filter) Pad(n int, r io.Reader, buf []byte) (int, error) {
	if n > f.p.N {
		return 0, ErrOverCapacity
	}
	draws := f.p.K * (f.p.N - n)
	// Rejection sampling above the largest multiple of M keeps the draws exactly uniform.
	limit := uint32(math.MaxUint32 - (math.MaxUint32 % uint64(f.p.M)))
	buf = buf[:len(buf)&^3]
	done, pos := 0, len(buf)
	for done < draws {
		if pos == len(buf) {
			want := min(len(buf), 4*(draws-done+8))
			if _, err := io.ReadFull(r, buf[:want]); err != nil {
				return done, fmt.Errorf("bloom padding: %w", err)
			}
			buf, pos = buf[:want], 0
		}
		v := binary.LittleEndian.Uint32(buf[pos:])
		pos += 4
		if v >= limit {
			continue
		}
		i := v % uint32(f.p.M)
		f.bits[i>>3] |= 1 << (i & 7)
		done++
	}
	return done, nil
}
