package okvs

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

const (
	// Lambda is the statistical security parameter λ of spec §4.2 / §5: the dense part has
	// Lambda cells beyond the cycle bound d, so the 2-core's linear system has full rank except
	// with probability about 2^-Lambda.
	Lambda = 40

	// DenseSlack is the constant in the spec's [R] cycle bound d = ⌈log₂ n⌉ + DenseSlack.
	DenseSlack = 8

	// SparseFactorNum / SparseFactorDen is the sparse rate 2.4 (GPRTY21 Fig. 4): the cuckoo graph
	// has m′ = ⌈2.4·n⌉ vertices for n edges. It is kept as a fraction so that m′ is computed
	// exactly in integers and every implementation gets the same table size.
	SparseFactorNum = 12
	SparseFactorDen = 5

	// MinValueSize and MaxValueSize bound the fixed value length ℓ. Values are ciphertexts in
	// Mohito (spec §4.2: only pseudorandom values may be encoded), so anything shorter than a
	// block is not meaningful, and 4 KiB is the largest padded command size of spec §6.
	MinValueSize = 16
	MaxValueSize = 4096

	// MaxPairs bounds n. It keeps every cell index in a uint32 and d + Lambda ≤ 128 (the dense
	// row is two 64-bit words), and lets UnmarshalBinary reject absurd headers up front.
	MaxPairs = 1 << 28

	// SeedSize is the length of the per-table hash seed sent in the header (spec §4.2).
	SeedSize = 16

	// MaxAttempts bounds the number of fresh seeds Encode tries. One attempt fails with
	// probability far below 2^-30 at the spec's parameters, so reaching the bound means the
	// random source is broken, not bad luck.
	MaxAttempts = 8
)

var (
	// ErrDuplicateKey is returned by Encode when two keys are equal. Such a set cannot be
	// encoded; the Mohito integrator replaces the later key with a random one (spec O6).
	ErrDuplicateKey = errors.New("okvs: duplicate key")

	// ErrMalformed is returned by UnmarshalBinary for any input that is not a table this
	// package would produce: wrong magic, version or parameters, or a wrong length.
	ErrMalformed = errors.New("okvs: malformed table")
)

// Table is a PaXoS oblivious key-value store. It is immutable once built by Encode or
// UnmarshalBinary, so Decode and DecodeBatch may be called from many goroutines at once.
type Table struct {
	p     params
	seed  [SeedSize]byte
	cells []byte // p.cells() cells of p.valueSize bytes: sparse half L, sparse half R, dense
}

// params is everything that follows from (n, ℓ). It is recomputed from the header on
// UnmarshalBinary, never read from the wire, so a table cannot claim a layout the spec does
// not give.
type params struct {
	n         int // number of encoded pairs
	valueSize int // ℓ
	halfL     int // |L| = ⌈m′/2⌉
	halfR     int // |R| = m′ − |L|
	d         int // cycle bound: at most d independent cycles in the 2-core
	dense     int // d + Lambda dense cells
}

func newParams(n, valueSize int) params {
	// In uint64 so that n ≤ MaxPairs cannot overflow on 32-bit platforms.
	sparse := int((uint64(n)*SparseFactorNum + SparseFactorDen - 1) / SparseFactorDen)
	d := log2Ceil(n) + DenseSlack
	return params{
		n:         n,
		valueSize: valueSize,
		halfL:     (sparse + 1) / 2,
		halfR:     sparse / 2,
		d:         d,
		dense:     d + Lambda,
	}
}

// log2Ceil returns ⌈log₂ n⌉, with ⌈log₂ 0⌉ taken as 0 so that the empty table still has
// DenseSlack + Lambda random dense cells.
func log2Ceil(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

func (p *params) sparse() int { return p.halfL + p.halfR }
func (p *params) cells() int  { return p.halfL + p.halfR + p.dense }

// denseMask returns the masks that keep the low p.dense bits of a 128-bit dense row.
func (p *params) denseMask() (lo, hi uint64) {
	switch {
	case p.dense >= 128:
		return ^uint64(0), ^uint64(0)
	case p.dense >= 64:
		return ^uint64(0), 1<<(p.dense-64) - 1
	default:
		return 1<<p.dense - 1, 0
	}
}

func validSizes(n, valueSize int) error {
	if n < 0 || n > MaxPairs {
		return fmt.Errorf("okvs: %d pairs, want at most %d", n, MaxPairs)
	}
	if valueSize < MinValueSize || valueSize > MaxValueSize {
		return fmt.Errorf("okvs: value size %d outside [%d, %d]", valueSize, MinValueSize, MaxValueSize)
	}
	return nil
}

// EncodedSize returns the exact length of MarshalBinary's output for a table of n pairs with
// values of valueSize bytes. It depends only on (n, valueSize), which is what lets callers pad
// tables to public capacities. It returns -1 if n or valueSize is out of range, or if the
// size does not fit an int (only possible on 32-bit platforms).
func EncodedSize(n, valueSize int) int {
	if validSizes(n, valueSize) != nil {
		return -1
	}
	p := newParams(n, valueSize)
	size := headerSize + uint64(p.cells())*uint64(valueSize)
	if size > math.MaxInt {
		return -1 // only reachable on 32-bit platforms
	}
	return int(size)
}

// Encode builds a table in which Decode(k_i) == v_i for every pair. All values must have the same
// length, between MinValueSize (16) and MaxValueSize (4096). rand supplies the seed and the random fill.
//
// The value size is taken from the values, so Encode needs at least one pair; use
// EncodeWithSize to build an empty table. Keys may have any length and must be distinct:
// equal keys make Encode return an error wrapping ErrDuplicateKey.
func Encode(keys, values [][]byte, rand io.Reader) (*Table, error) {
	if len(values) == 0 {
		return nil, errors.New("okvs: no pairs, so the value size is unknown; use EncodeWithSize")
	}
	return EncodeWithSize(keys, values, len(values[0]), rand)
}

// EncodeWithSize is Encode with an explicit value size, which also allows n = 0 (a table of
// random cells that decodes every key to random bytes). Every value must be valueSize bytes.
func EncodeWithSize(keys, values [][]byte, valueSize int, rand io.Reader) (*Table, error) {
	if len(keys) != len(values) {
		return nil, fmt.Errorf("okvs: %d keys but %d values", len(keys), len(values))
	}
	if err := validSizes(len(keys), valueSize); err != nil {
		return nil, err
	}
	for i, v := range values {
		if len(v) != valueSize {
			return nil, fmt.Errorf("okvs: values[%d] has %d bytes, want %d", i, len(v), valueSize)
		}
	}
	e := newEncoder(keys, values, newParams(len(keys), valueSize))
	return e.encode(rand)
}

// ValueSize returns the length ℓ of every value, and of every Decode result.
func (t *Table) ValueSize() int { return t.p.valueSize }

// Len returns the number of cells (sparse and dense), not the number of pairs.
func (t *Table) Len() int { return t.p.cells() }

func (t *Table) cell(i int) []byte {
	l := t.p.valueSize
	return t.cells[i*l : i*l+l : i*l+l]
}
