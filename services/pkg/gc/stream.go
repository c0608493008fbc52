package gc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The garbled stream, version 1. Every integer is little-endian; lengths follow from the
// header's counts, so a reader knows the exact size after the header and never frames
// chunks: the Garbler writes, and the evaluator reads, in chunks of any size.
//
//	offset  size        field
//	0       4           magic "OBGC"
//	4       1           version (2: free-XOR, half-gates, GKWY20 hash, 1-row identity gates
//	                    with E = H; version 1 sent both identity rows)
//	5       3           reserved, zero
//	8       16          execID (fresh random per execution, spec D22)
//	24      32          circuit hash (Circuit.Hash; the evaluator's Plan must match)
//	56      16          π key: the AES-128 key of the fixed-key hash, fresh per execution
//	72      8           n, input wires
//	80      8           number of AND gates
//	88      8           m, output wires
//	96      4           c, context length, at most MaxContext
//	100     c           context: the caller's bytes (PPS puts fnid and round here), opaque to gc
//	        ⌈n/8⌉       input kinds: bit u (LSB first) set when input wire u is a constant
//	                    (nullified or hard-wired) with one label, clear for an identity gate
//	        16·k        identity tables, input wire order: one row per identity gate,
//	                    T_u = H(a_0, t) ⊕ H(a_1, t) ⊕ Δ with t = tweakID(exec, u); the row
//	                    of the label with permute bit 0 is implicit, since the Garbler sets
//	                    that label's W_u to H(a, t) (spec §8.5, the 1-ciphertext option)
//	        16·(n−k)    constant labels, input wire order: W_u^v for the constant bit v
//	        32·ANDs     gate tables TG ‖ TE, in the Plan's schedule order
//	        ⌈m/8⌉       decoding bits d_j = lsb(W_j^0) ⊕ r_j (LSB first), padding bits zero
//
// Nothing else about output labels is ever sent (spec §3.7): the evaluator decodes
// (o⊕r)_j = lsb(X_j) ⊕ d_j.
const (
	streamMagic   = "OBGC"
	streamVersion = 2
	// tablesVersion is a pregarbled execution's AND tables (pregarble.go): the header, its
	// context, then 32·ANDs bytes of gate tables; inputsVersion is the rest of that
	// execution, sent when its inputs are known: the header (same execID, π key and counts),
	// its context, input kinds, identity tables of two rows (32·k, row lsb(a) first-indexed),
	// constant labels and decoding bits.
	tablesVersion = 3
	inputsVersion = 4
	headerSize    = 100
	// MaxContext bounds the caller's context bytes in the stream header.
	MaxContext = 4096
)

// Header is the fixed part of a garbled stream: what the evaluator learns before the
// tables.
type Header struct {
	ExecID      [16]byte
	CircuitHash [32]byte
	// Key is π's AES-128 key (public: it is in the stream; fresh per execution).
	Key     [16]byte
	Inputs  uint64
	ANDs    uint64
	Outputs uint64
	Context []byte
	// version is the stream's version (streamVersion, tablesVersion or inputsVersion); zero
	// is streamVersion.
	version byte
}

var (
	// ErrMalformed is wrapped by every error about a stream that does not parse: bad
	// magic or version, counts out of range, short data.
	ErrMalformed = errors.New("gc: malformed garbled stream")
	// ErrCircuitMismatch means the stream was garbled for another circuit than the Plan.
	ErrCircuitMismatch = errors.New("gc: garbled stream is for another circuit")
)

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

func (h *Header) appendTo(b []byte) []byte {
	b = append(b, streamMagic...)
	v := h.version
	if v == 0 {
		v = streamVersion
	}
	b = append(b, v, 0, 0, 0)
	b = append(b, h.ExecID[:]...)
	b = append(b, h.CircuitHash[:]...)
	b = append(b, h.Key[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.Inputs)
	b = binary.LittleEndian.AppendUint64(b, h.ANDs)
	b = binary.LittleEndian.AppendUint64(b, h.Outputs)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Context)))
	return append(b, h.Context...)
}

// ReadHeader reads and checks the fixed header of a stream (magic, version, reserved
// bytes, context length). It reads exactly the header's bytes, so Evaluate can follow on
// the same reader with EvaluateAfterHeader.
func ReadHeader(r io.Reader) (*Header, error) {
	var b [headerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, readErr("header", err)
	}
	if string(b[:4]) != streamMagic {
		return nil, malformed("bad magic %q", b[:4])
	}
	if b[4] != streamVersion && b[4] != tablesVersion && b[4] != inputsVersion {
		return nil, malformed("version %d, want %d, %d or %d", b[4], streamVersion, tablesVersion, inputsVersion)
	}
	if b[5]|b[6]|b[7] != 0 {
		return nil, malformed("reserved bytes are not zero")
	}
	h := &Header{version: b[4]}
	copy(h.ExecID[:], b[8:24])
	copy(h.CircuitHash[:], b[24:56])
	copy(h.Key[:], b[56:72])
	h.Inputs = binary.LittleEndian.Uint64(b[72:])
	h.ANDs = binary.LittleEndian.Uint64(b[80:])
	h.Outputs = binary.LittleEndian.Uint64(b[88:])
	n := binary.LittleEndian.Uint32(b[96:])
	if n > MaxContext {
		return nil, malformed("context of %d bytes (at most %d)", n, MaxContext)
	}
	h.Context = make([]byte, n)
	if _, err := io.ReadFull(r, h.Context); err != nil {
		return nil, readErr("context", err)
	}
	return h, nil
}

// readErr turns a short read into ErrMalformed and keeps other read errors as they are.
func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return malformed("stream ends in the %s", what)
	}
	return fmt.Errorf("gc: read %s: %w", what, err)
}

// StreamSize is the length of a stream for p with nConst constant input wires and a
// context of ctxLen bytes: header + input kinds + 16 B per identity gate + 16 B per
// constant label + 32 B per AND + decoding bits (spec §10 #16); an identity row and a
// constant label being both 16 B, nConst does not change it (kept for callers).
func StreamSize(p *Plan, nConst, ctxLen int) int64 {
	n := int64(p.nIn)
	return headerSize + int64(ctxLen) + (n+7)/8 + 16*n +
		32*int64(p.nAND) + int64(p.nOut+7)/8
}
