// Package records frames batches of fixed-size records, the shape of every record stream
// between the roles: count(4, big-endian) ‖ count × record, every record of one size that the
// receiver knows from its own parameters, so a batch is checked by its length alone and never
// by anything it says about itself beyond the count. Split reads a bare run of such records
// (no count), whose length alone says how many there are.
package records

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Sentinel errors of a malformed batch.
var (
	ErrCount  = errors.New("records: count above the limit")
	ErrLength = errors.New("records: length does not match the count")
)

// Size is the length of a batch of n records of size bytes.
func Size(n, size int) int { return 4 + n*size }

// Begin appends the count of a batch of n records of size bytes to b, with room for the
// records, which the caller appends next.
func Begin(b []byte, n, size int) []byte {
	return binary.BigEndian.AppendUint32(slices.Grow(b, Size(n, size)), uint32(n))
}

// Parse returns the records of batch b, each size bytes, at most limit of them. Every record
// aliases b with its capacity capped, so appending to one never writes into the next.
func Parse(b []byte, size, limit int) ([][]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no count", ErrLength, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(max(limit, 0)) {
		return nil, fmt.Errorf("%w: %d records, at most %d", ErrCount, n, limit)
	}
	if uint64(len(b)-4) != uint64(n)*uint64(max(size, 0)) {
		return nil, fmt.Errorf("%w: %d bytes for %d records of %d", ErrLength, len(b), n, size)
	}
	return split(b[4:], size, int(n)), nil
}

// Split returns the records of b, a run of records of size bytes without a count, at most
// limit of them, aliasing b as Parse does. An empty b holds no record.
func Split(b []byte, size, limit int) ([][]byte, error) {
	if size < 1 || len(b)%size != 0 {
		return nil, fmt.Errorf("%w: %d bytes are not whole records of %d", ErrLength, len(b), size)
	}
	if n := len(b) / size; n > limit {
		return nil, fmt.Errorf("%w: %d records, at most %d", ErrCount, n, limit)
	}
	return split(b, size, len(b)/size), nil
}

func split(b []byte, size, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[i*size : (i+1)*size : (i+1)*size]
	}
	return out
}
