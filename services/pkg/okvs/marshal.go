package okvs

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// The serialized table is a fixed 32-byte header followed by the cells:
//
//	offset  size  field
//	0       4     magic "OKVS"
//	4       1     version (1: PaXoS 2-hash, SHA-256 hashing, m′ = ⌈2.4n⌉, d = ⌈log₂ n⌉ + 8)
//	5       1     λ, must be Lambda (40)
//	6       2     reserved, must be zero
//	8       4     n, number of pairs, big-endian, at most MaxPairs
//	12      4     ℓ, value size, big-endian, in [MinValueSize, MaxValueSize]
//	16      16    seed
//	32      m·ℓ   cells: sparse half L, sparse half R, dense, m = ⌈2.4n⌉ + d + λ
//
// The layout is derived from (n, ℓ) alone, so the total length is checked exactly before
// anything is allocated.
const (
	headerSize = 32
	version    = 1
	magic      = "OKVS"
)

// MarshalBinary returns the table in the versioned format above. Its length is
// EncodedSize(n, ValueSize()).
func (t *Table) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(make([]byte, 0, headerSize+len(t.cells)))
}

// WriteTo writes the MarshalBinary encoding to w without building it in memory first, which
// saves a copy of the whole table (hundreds of MiB at n = 100k × 1 KiB) when it is streamed
// to a file or a network connection.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	if t.p.valueSize == 0 {
		return 0, fmt.Errorf("okvs: marshal an empty Table value")
	}
	var h [headerSize]byte
	t.appendHeader(h[:0])
	n, err := w.Write(h[:])
	if err != nil {
		return int64(n), fmt.Errorf("okvs: write header: %w", err)
	}
	m, err := w.Write(t.cells)
	if err != nil {
		return int64(n + m), fmt.Errorf("okvs: write cells: %w", err)
	}
	return int64(n + m), nil
}

func (t *Table) appendHeader(b []byte) []byte {
	b = append(b, magic...)
	b = append(b, version, Lambda, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(t.p.n))
	b = binary.BigEndian.AppendUint32(b, uint32(t.p.valueSize))
	return append(b, t.seed[:]...)
}

// AppendBinary appends the MarshalBinary encoding to b, so a caller can serialize into a
// reused or larger (padded) buffer.
func (t *Table) AppendBinary(b []byte) ([]byte, error) {
	if t.p.valueSize == 0 {
		return nil, fmt.Errorf("okvs: marshal an empty Table value")
	}
	b = slices.Grow(b, headerSize+len(t.cells))
	return append(t.appendHeader(b), t.cells...), nil
}

// UnmarshalBinary replaces t with the table encoded in b. b is copied. Any input that
// MarshalBinary could not have produced is rejected with an error wrapping ErrMalformed, and
// the length is checked against the header before the cells are allocated, so a short
// message claiming a huge table costs nothing. t is left unchanged on error.
func (t *Table) UnmarshalBinary(b []byte) error {
	if len(b) < headerSize {
		return fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(b), headerSize)
	}
	if string(b[0:4]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrMalformed, b[0:4])
	}
	if b[4] != version {
		return fmt.Errorf("%w: unsupported version %d", ErrMalformed, b[4])
	}
	if b[5] != Lambda {
		return fmt.Errorf("%w: λ = %d, want %d", ErrMalformed, b[5], Lambda)
	}
	if b[6] != 0 || b[7] != 0 {
		return fmt.Errorf("%w: reserved header bytes are not zero", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(b[8:12])
	l := binary.BigEndian.Uint32(b[12:16])
	if n > MaxPairs {
		return fmt.Errorf("%w: %d pairs, more than %d", ErrMalformed, n, MaxPairs)
	}
	if l < MinValueSize || l > MaxValueSize {
		return fmt.Errorf("%w: value size %d outside [%d, %d]", ErrMalformed, l, MinValueSize, MaxValueSize)
	}
	// Both fields are bounded now, so EncodedSize cannot overflow on 64-bit platforms; on
	// 32-bit ones it returns -1 for sizes that do not fit, which never equals len(b).
	if want := EncodedSize(int(n), int(l)); len(b) != want {
		return fmt.Errorf("%w: %d bytes, want %d for %d pairs of %d bytes", ErrMalformed, len(b), want, n, l)
	}
	t.p = newParams(int(n), int(l))
	copy(t.seed[:], b[16:32])
	t.cells = slices.Clone(b[headerSize:])
	return nil
}
