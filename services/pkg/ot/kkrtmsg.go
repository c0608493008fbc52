package ot

import (
	"encoding/binary"
	"fmt"
)

// The KKRT messages, in the framing of messages.go (type, version, session; little-endian
// integers; exact-length canonical decoders).
const (
	msgKKRTSetup      = 0x11
	msgKKRTSetupReply = 0x12
	msgKKRTRequest    = 0x13

	setupSize      = headerSize + PointSize
	setupReplySize = headerSize + Kappa*PointSize
)

// KKRTSetup is the Receiver's first message: its session and four base-OT setups.
type KKRTSetup struct {
	Session SessionID
	Base    [kkrtGroups]Setup
}

// KKRTSetupReply is the Sender's answer: the four base-OT replies.
type KKRTSetupReply struct {
	Session SessionID
	Base    [kkrtGroups]SetupReply
}

// KKRTRequest is the Receiver's message for one batch at Offset (the padded instance count
// of the session's earlier batches): one row u_j = t_j ⊕ t'_j ⊕ C(x_j) per instance.
type KKRTRequest struct {
	Session SessionID
	Offset  uint64
	Rows    []Wide
}

// MarshalBinary encodes the setup: header, then the four base-OT setups.
func (m *KKRTSetup) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, headerSize+kkrtGroups*setupSize)
	b = putHeader(b, msgKKRTSetup, &m.Session)
	for g := range m.Base {
		e, err := m.Base[g].MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, e...)
	}
	return b, nil
}

// UnmarshalBinary decodes a setup; every base setup must decode.
func (m *KKRTSetup) UnmarshalBinary(b []byte) error {
	const what = "decode KKRT setup"
	s, b, err := readHeader(b, msgKKRTSetup, what)
	if err != nil {
		return err
	}
	if len(b) != kkrtGroups*setupSize {
		return fmt.Errorf("%s: %d bytes of base setups, want %d: %w", what, len(b), kkrtGroups*setupSize, ErrMalformed)
	}
	out := KKRTSetup{Session: s}
	for g := range out.Base {
		if err := out.Base[g].UnmarshalBinary(b[g*setupSize : (g+1)*setupSize]); err != nil {
			return fmt.Errorf("%s: base %d: %w", what, g, err)
		}
	}
	*m = out
	return nil
}

// MarshalBinary encodes the reply: header, then the four base-OT replies.
func (m *KKRTSetupReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, headerSize+kkrtGroups*setupReplySize)
	b = putHeader(b, msgKKRTSetupReply, &m.Session)
	for g := range m.Base {
		e, err := m.Base[g].MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, e...)
	}
	return b, nil
}

// UnmarshalBinary decodes a reply; every base reply must decode.
func (m *KKRTSetupReply) UnmarshalBinary(b []byte) error {
	const what = "decode KKRT setup reply"
	s, b, err := readHeader(b, msgKKRTSetupReply, what)
	if err != nil {
		return err
	}
	if len(b) != kkrtGroups*setupReplySize {
		return fmt.Errorf("%s: %d bytes of base replies, want %d: %w", what, len(b), kkrtGroups*setupReplySize, ErrMalformed)
	}
	out := KKRTSetupReply{Session: s}
	for g := range out.Base {
		if err := out.Base[g].UnmarshalBinary(b[g*setupReplySize : (g+1)*setupReplySize]); err != nil {
			return fmt.Errorf("%s: base %d: %w", what, g, err)
		}
	}
	*m = out
	return nil
}

// check is the request's shape: row count in range, offset aligned.
func (m *KKRTRequest) check() error {
	if len(m.Rows) > MaxKKRTBatch {
		return fmt.Errorf("%d instances (at most %d): %w", len(m.Rows), MaxKKRTBatch, ErrMalformed)
	}
	if m.Offset%128 != 0 {
		return fmt.Errorf("offset %d not a multiple of 128: %w", m.Offset, ErrMalformed)
	}
	return nil
}

// MarshalBinary encodes the request: header, offset, count, the rows.
func (m *KKRTRequest) MarshalBinary() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("encode KKRT request: %w", err)
	}
	b := make([]byte, 0, headerSize+batchSize+WideSize*len(m.Rows))
	b = putHeader(b, msgKKRTRequest, &m.Session)
	b = putBatch(b, m.Offset, len(m.Rows))
	for j := range m.Rows {
		b = append(b, wideBytes(&m.Rows[j])...)
	}
	return b, nil
}

// UnmarshalBinary decodes a request of exactly count rows.
func (m *KKRTRequest) UnmarshalBinary(b []byte) error {
	const what = "decode KKRT request"
	s, b, err := readHeader(b, msgKKRTRequest, what)
	if err != nil {
		return err
	}
	if len(b) < batchSize {
		return fmt.Errorf("%s: truncated batch header: %w", what, ErrMalformed)
	}
	// readBatch bounds the count by MaxBatch; the KKRT bound is tighter and checked first
	// so that a large count is refused before its size is computed.
	if n := binary.LittleEndian.Uint32(b[8:]); n > MaxKKRTBatch {
		return fmt.Errorf("%s: %d instances, at most %d: %w", what, n, MaxKKRTBatch, ErrMalformed)
	}
	off, n, b, err := readBatch(b, what, func(n int) uint64 { return uint64(n) * WideSize })
	if err != nil {
		return err
	}
	out := KKRTRequest{Session: s, Offset: off, Rows: make([]Wide, n)}
	for j := range out.Rows {
		copy(wideBytes(&out.Rows[j]), b[j*WideSize:])
	}
	*m = out
	return nil
}
