package mohito

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/obscura-iot/obscura/services/pkg/okvs"
)

// This file holds the fixed-layout envelopes exchanged between the integrator
// and the shuffler (M2–M4, the G2 check, M9, M10). Every parser checks version,
// kind, round and exact size before looking at the body.

// ForwardSize is |M2| = header ‖ index(4) ‖ outer.
func (p Params) ForwardSize() int { return headerSize + 4 + p.OuterSize() }

// MarshalForward builds M2 for message index i (spec §3.6 C2).
func MarshalForward(p Params, t uint64, index uint32, outer []byte) ([]byte, error) {
	return AppendForward(nil, p, t, index, outer)
}

// AppendForward appends M2 for message index i to dst (a batch of M2s back to back) and
// returns the extended slice; dst is unchanged on error.
func AppendForward(dst []byte, p Params, t uint64, index uint32, outer []byte) ([]byte, error) {
	if len(outer) != p.OuterSize() {
		return dst, fmt.Errorf("%w: outer layer of %d bytes", ErrSize, len(outer))
	}
	n := len(dst)
	dst = slices.Grow(dst, p.ForwardSize())[:n+p.ForwardSize()]
	b := dst[n:]
	putHeader(b, KindForward, t)
	binary.BigEndian.PutUint32(b[headerSize:], index)
	copy(b[headerSize+4:], outer)
	return dst, nil
}

// ParseForward decodes M2 and returns the index and the outer ciphertext
// (aliasing b).
func ParseForward(p Params, t uint64, b []byte) (uint32, []byte, error) {
	got, err := parseHeader(b, KindForward, p.ForwardSize())
	if err != nil {
		return 0, nil, err
	}
	if err := expectRound(got, t); err != nil {
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(b[headerSize:]), b[headerSize+4:], nil
}

// ParseSubmission decodes M1 at the gateway: exact size, kind and current
// round; it returns the outer layer (aliasing b) and the x₁ seed.
func ParseSubmission(p Params, t uint64, b []byte) ([]byte, ShareSeed, error) {
	var seed ShareSeed
	got, err := parseHeader(b, KindSubmission, p.SubmissionSize())
	if err != nil {
		return nil, seed, err
	}
	if err := expectRound(got, t); err != nil {
		return nil, seed, err
	}
	copy(seed[:], b[len(b)-SeedSize:])
	return b[headerSize : len(b)-SeedSize], seed, nil
}

const closeSize = headerSize + 4

// marshalClose builds M3a: the number k of forwarded messages.
func marshalClose(t uint64, k int) []byte {
	b := make([]byte, closeSize)
	putHeader(b, KindClose, t)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(k))
	return b
}

func parseClose(t uint64, b []byte) (int, error) {
	got, err := parseHeader(b, KindClose, closeSize)
	if err != nil {
		return 0, err
	}
	if err := expectRound(got, t); err != nil {
		return 0, err
	}
	k := binary.BigEndian.Uint32(b[headerSize:])
	if k > MaxRoundMessages {
		return 0, fmt.Errorf("%w: k = %d", ErrNonCanonical, k)
	}
	return int(k), nil
}

// MaxRoundMessages bounds k and N so that no count from the network can make
// a party allocate without limit.
const MaxRoundMessages = 1 << 24

// G2 check records. Flags are 0 or 1; anything else is non-canonical.
const (
	challengeRec = 1 + 2*ElemSize // ok ‖ s₂ ‖ Z₂
	replyRec     = 1 + 3*ElemSize // ok ‖ s₁ ‖ Z₁ ‖ w₁
	verdictRec   = 1 + ElemSize   // ok ‖ w₂
)

func checkSize(k, rec, extra int) int { return headerSize + 4 + extra + k*rec }

// checkBody validates the common part of the three check envelopes and returns
// the record area.
func checkBody(b []byte, kind Kind, t uint64, k, rec, extra int) ([]byte, error) {
	got, err := parseHeader(b, kind, checkSize(k, rec, extra))
	if err != nil {
		return nil, err
	}
	if err := expectRound(got, t); err != nil {
		return nil, err
	}
	if int(binary.BigEndian.Uint32(b[headerSize:])) != k {
		return nil, fmt.Errorf("%w: check for a different k", ErrNonCanonical)
	}
	return b[headerSize+4:], nil
}

func readFlag(b byte) (bool, error) {
	if b > 1 {
		return false, fmt.Errorf("%w: flag %d", ErrNonCanonical, b)
	}
	return b == 1, nil
}

// readElems reads n canonical elements.
func readElems(b []byte, out ...*Elem) error {
	for i, e := range out {
		v, err := ReadElem(b[ElemSize*i:])
		if err != nil {
			return err
		}
		*e = v
	}
	return nil
}

// FinishSize is |M3b| = header ‖ Y.
func (p Params) FinishSize() int { return headerSize + ElemSize*p.Vendors }

const summarySize = headerSize + 4 + 4

// ShuffleSummary is the end-of-stream marker of M4: the list length N and the
// burst excess S (spec §4.5 Stage C: encoders seal S_v after C_v + S records).
type ShuffleSummary struct {
	N, S int
}

func marshalSummary(t uint64, s ShuffleSummary) []byte {
	b := make([]byte, summarySize)
	putHeader(b, KindShuffleSummary, t)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(s.N))
	binary.BigEndian.PutUint32(b[headerSize+4:], uint32(s.S))
	return b
}

// ParseShuffleSummary decodes the M4 end marker.
func ParseShuffleSummary(t uint64, b []byte) (ShuffleSummary, error) {
	got, err := parseHeader(b, KindShuffleSummary, summarySize)
	if err != nil {
		return ShuffleSummary{}, err
	}
	if err := expectRound(got, t); err != nil {
		return ShuffleSummary{}, err
	}
	s := ShuffleSummary{N: int(binary.BigEndian.Uint32(b[headerSize:])), S: int(binary.BigEndian.Uint32(b[headerSize+4:]))}
	if s.N > MaxRoundMessages || s.S > MaxRoundMessages {
		return ShuffleSummary{}, fmt.Errorf("%w: summary N=%d S=%d", ErrNonCanonical, s.N, s.S)
	}
	return s, nil
}

// Batches: M4 (⟨m⟩_I entries in π order), M9 (r′ by shuffled position) and M10
// (r by original index) are streams of fixed-size records, sent in batches of
// header ‖ start(4) ‖ count(4) ‖ count × record so that they can be split over
// several senders and receivers by position range (spec §4.5).
const batchHeader = headerSize + 8

// BatchSize is the size of a batch of count records of recSize bytes.
func BatchSize(count, recSize int) int { return batchHeader + count*recSize }

func marshalBatch(kind Kind, t uint64, start int, recs [][]byte, recSize int) ([]byte, error) {
	b := make([]byte, BatchSize(len(recs), recSize))
	putHeader(b, kind, t)
	binary.BigEndian.PutUint32(b[headerSize:], uint32(start))
	binary.BigEndian.PutUint32(b[headerSize+4:], uint32(len(recs)))
	o := batchHeader
	for _, r := range recs {
		if len(r) != recSize {
			return nil, fmt.Errorf("%w: record of %d bytes, want %d", ErrSize, len(r), recSize)
		}
		o += copy(b[o:], r)
	}
	return b, nil
}

// parseBatch returns start and the records (aliasing b); start+count must lie
// within [0, limit].
func parseBatch(kind Kind, t uint64, b []byte, recSize, limit int) (int, [][]byte, error) {
	if len(b) < batchHeader {
		return 0, nil, fmt.Errorf("%w: batch of %d bytes", ErrSize, len(b))
	}
	count := int(binary.BigEndian.Uint32(b[headerSize+4:]))
	start := int(binary.BigEndian.Uint32(b[headerSize:]))
	if count > limit || start > limit-count {
		return 0, nil, fmt.Errorf("%w: batch [%d, %d+%d) outside [0, %d)", ErrIndex, start, start, count, limit)
	}
	got, err := parseHeader(b, kind, BatchSize(count, recSize))
	if err != nil {
		return 0, nil, err
	}
	if err := expectRound(got, t); err != nil {
		return 0, nil, err
	}
	recs := make([][]byte, count)
	for i := range recs {
		o := batchHeader + i*recSize
		recs[i] = b[o : o+recSize : o+recSize]
	}
	return start, recs, nil
}

// MarshalResponseLayer builds an M9 batch: r′ values at shuffled positions
// [start, start+len(values)).
func MarshalResponseLayer(p Params, t uint64, start int, values [][]byte) ([]byte, error) {
	return marshalBatch(KindResponseLayer, t, start, values, p.ResponseLayerSize())
}

// Table envelopes: M5 (command OKVS, I → V), M8 (response OKVS, V → I) and
// M8L (late response OKVS, V → I, spec App. A) are header ‖ vendor(4) ‖
// capacity(4) ‖ okvs bytes. The receiver checks the capacity against the
// public policy before parsing the table.
const tableHeader = headerSize + 8

// MarshalTable frames an OKVS of the given capacity for vendor v.
func MarshalTable(kind Kind, t uint64, v uint32, capacity int, table *okvs.Table) ([]byte, error) {
	if kind != KindCommandTable && kind != KindResponseTable && kind != KindLateResponseTable {
		return nil, fmt.Errorf("%w: table kind %#x", ErrParams, byte(kind))
	}
	tb, err := table.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if okvs.EncodedSize(capacity, table.ValueSize()) != len(tb) {
		return nil, fmt.Errorf("%w: table does not have capacity %d", ErrTableShape, capacity)
	}
	b := make([]byte, tableHeader+len(tb))
	putHeader(b, kind, t)
	binary.BigEndian.PutUint32(b[headerSize:], v)
	binary.BigEndian.PutUint32(b[headerSize+4:], uint32(capacity))
	copy(b[tableHeader:], tb)
	return b, nil
}

func parseTableEnvelope(kind Kind, t uint64, v uint32, b []byte, valueSize int, capOK func(int) bool) (*okvs.Table, int, error) {
	if len(b) < tableHeader {
		return nil, 0, fmt.Errorf("%w: table envelope of %d bytes", ErrSize, len(b))
	}
	capacity := int(binary.BigEndian.Uint32(b[headerSize+4:]))
	if capacity > okvs.MaxPairs || !capOK(capacity) {
		return nil, 0, fmt.Errorf("%w: capacity %d not allowed", ErrTableShape, capacity)
	}
	size := okvs.EncodedSize(capacity, valueSize)
	if size < 0 {
		return nil, 0, fmt.Errorf("%w: capacity %d", ErrTableShape, capacity)
	}
	got, err := parseHeader(b, kind, tableHeader+size)
	if err != nil {
		return nil, 0, err
	}
	if err := expectRound(got, t); err != nil {
		return nil, 0, err
	}
	if binary.BigEndian.Uint32(b[headerSize:]) != v {
		return nil, 0, fmt.Errorf("%w: table for another vendor", ErrKind)
	}
	table, err := ParseTable(b[tableHeader:], capacity, valueSize)
	return table, capacity, err
}

// ParseCommandTable is the vendor's decoder of M5: the capacity must be a size
// class K·2^i of its public capacity K (G3b).
func ParseCommandTable(p Params, t uint64, v uint32, k int, b []byte) (*okvs.Table, int, error) {
	return parseTableEnvelope(KindCommandTable, t, v, b, p.DeviceCiphertextSize(), func(c int) bool {
		return c >= 1 && CommandCapacity(c, k) == c
	})
}

// ParseResponseTable is the integrator's decoder of M8: the capacity must be
// a multiple of the public quantum (G6) and at most maxCapacity.
func ParseResponseTable(p Params, t uint64, v uint32, quantum, maxCapacity int, b []byte) (*okvs.Table, int, error) {
	return parseTableEnvelope(KindResponseTable, t, v, b, p.ResponseTableValueSize(), func(c int) bool {
		return c >= 1 && c <= maxCapacity && c%max(quantum, 1) == 0
	})
}
