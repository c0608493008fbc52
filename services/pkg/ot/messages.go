package ot

import (
	"encoding/binary"
	"fmt"
)

// The messages between Receiver (Broker) and Sender (Garbler). Integers are little-endian;
// every message starts with its type, the version and the session. Decoders check the exact
// length before allocating, so a message costs at most its own size, and they accept only
// the canonical encoding (re-encoding a decoded message gives the same bytes).
const (
	version = 1

	msgSetup           = 0x01
	msgSetupReply      = 0x02
	msgExtendRequest   = 0x03
	msgCorrelatedReply = 0x04
	msgChosenReply     = 0x05

	headerSize = 2 + len(SessionID{})
	batchSize  = 8 + 4 // offset, count
)

// Setup is the Receiver's first message: the session and the base-OT point A = aG.
type Setup struct {
	Session SessionID
	A       [PointSize]byte
}

// SetupReply is the Sender's answer: B_i for each of the Kappa base OTs.
type SetupReply struct {
	Session SessionID
	B       [Kappa][PointSize]byte
}

// ExtendRequest is the Receiver's message for one batch of Count OTs at Offset (the number
// of OTs, padded to 128, of the session's earlier batches): the Kappa columns u_i =
// G(k_i^0) ⊕ G(k_i^1) ⊕ r, each padded(Count)/8 bytes.
type ExtendRequest struct {
	Session SessionID
	Offset  uint64
	Count   int
	Columns [Kappa][]byte
}

// CorrelatedReply is the Sender's answer for correlated OT: τ_j per OT.
type CorrelatedReply struct {
	Session SessionID
	Offset  uint64
	Tau     []Block
}

// ChosenReply is the Sender's answer for chosen-message OT: (y0_j, y1_j) per OT.
type ChosenReply struct {
	Session SessionID
	Offset  uint64
	Y       [][2]Block
}

func putHeader(b []byte, typ byte, s *SessionID) []byte {
	b = append(b, typ, version)
	return append(b, s[:]...)
}

func readHeader(b []byte, typ byte, what string) (SessionID, []byte, error) {
	var s SessionID
	if len(b) < headerSize {
		return s, nil, fmt.Errorf("%s: %d bytes, shorter than the header: %w", what, len(b), ErrMalformed)
	}
	if b[0] != typ || b[1] != version {
		return s, nil, fmt.Errorf("%s: type %#x version %d, want %#x version %d: %w", what, b[0], b[1], typ, version, ErrMalformed)
	}
	copy(s[:], b[2:headerSize])
	return s, b[headerSize:], nil
}

// readBatch reads offset and count and checks that exactly count items of itemSize bytes
// follow (for the request, itemSize is per 128 OTs and count is rounded up).
func readBatch(b []byte, what string, size func(n int) uint64) (uint64, int, []byte, error) {
	if len(b) < batchSize {
		return 0, 0, nil, fmt.Errorf("%s: truncated batch header: %w", what, ErrMalformed)
	}
	off := binary.LittleEndian.Uint64(b)
	n := binary.LittleEndian.Uint32(b[8:])
	b = b[batchSize:]
	if off%128 != 0 {
		return 0, 0, nil, fmt.Errorf("%s: offset %d not a multiple of 128: %w", what, off, ErrMalformed)
	}
	if n > MaxBatch {
		return 0, 0, nil, fmt.Errorf("%s: %d OTs, at most %d: %w", what, n, MaxBatch, ErrMalformed)
	}
	if want := size(int(n)); uint64(len(b)) != want {
		return 0, 0, nil, fmt.Errorf("%s: %d OTs need %d bytes, got %d: %w", what, n, want, len(b), ErrMalformed)
	}
	return off, int(n), b, nil
}

func putBatch(b []byte, off uint64, n int) []byte {
	b = binary.LittleEndian.AppendUint64(b, off)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// MarshalBinary encodes the setup: header, A.
func (m *Setup) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, headerSize+PointSize)
	b = putHeader(b, msgSetup, &m.Session)
	return append(b, m.A[:]...), nil
}

// UnmarshalBinary decodes a setup; A must be a canonical non-identity point.
func (m *Setup) UnmarshalBinary(b []byte) error {
	const what = "decode OT setup"
	s, b, err := readHeader(b, msgSetup, what)
	if err != nil {
		return err
	}
	if len(b) != PointSize {
		return fmt.Errorf("%s: %d bytes of point: %w", what, len(b), ErrMalformed)
	}
	var a [PointSize]byte
	copy(a[:], b)
	if _, err := unmarshalPoint(&a); err != nil {
		return fmt.Errorf("%s: A: %w", what, err)
	}
	m.Session, m.A = s, a
	return nil
}

// MarshalBinary encodes the setup reply: header, Kappa points.
func (m *SetupReply) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, headerSize+Kappa*PointSize)
	b = putHeader(b, msgSetupReply, &m.Session)
	for i := range m.B {
		b = append(b, m.B[i][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a setup reply; every B_i must be a canonical non-identity point.
func (m *SetupReply) UnmarshalBinary(b []byte) error {
	const what = "decode OT setup reply"
	s, b, err := readHeader(b, msgSetupReply, what)
	if err != nil {
		return err
	}
	if len(b) != Kappa*PointSize {
		return fmt.Errorf("%s: %d bytes of points, want %d: %w", what, len(b), Kappa*PointSize, ErrMalformed)
	}
	var out SetupReply
	out.Session = s
	for i := range out.B {
		copy(out.B[i][:], b[i*PointSize:])
		if _, err := unmarshalPoint(&out.B[i]); err != nil {
			return fmt.Errorf("%s: B_%d: %w", what, i, err)
		}
	}
	*m = out
	return nil
}

// check is the request's shape: count in range, offset aligned, every column of the padded
// length.
func (m *ExtendRequest) check() error {
	if m.Count < 0 || m.Count > MaxBatch {
		return fmt.Errorf("%d OTs (at most %d): %w", m.Count, MaxBatch, ErrMalformed)
	}
	if m.Offset%128 != 0 {
		return fmt.Errorf("offset %d not a multiple of 128: %w", m.Offset, ErrMalformed)
	}
	for i := range m.Columns {
		if len(m.Columns[i]) != padded(m.Count)/8 {
			return fmt.Errorf("column %d of %d bytes for %d OTs: %w", i, len(m.Columns[i]), m.Count, ErrMalformed)
		}
	}
	return nil
}

// MarshalBinary encodes the request: header, offset, count, the Kappa columns.
func (m *ExtendRequest) MarshalBinary() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("encode OT extend request: %w", err)
	}
	w := padded(m.Count) / 8
	b := make([]byte, 0, headerSize+batchSize+Kappa*w)
	b = putHeader(b, msgExtendRequest, &m.Session)
	b = putBatch(b, m.Offset, m.Count)
	for i := range m.Columns {
		b = append(b, m.Columns[i]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a request of exactly Kappa padded columns.
func (m *ExtendRequest) UnmarshalBinary(b []byte) error {
	const what = "decode OT extend request"
	s, b, err := readHeader(b, msgExtendRequest, what)
	if err != nil {
		return err
	}
	off, n, b, err := readBatch(b, what, func(n int) uint64 { return uint64(Kappa * padded(n) / 8) })
	if err != nil {
		return err
	}
	w := padded(n) / 8
	data := make([]byte, len(b))
	copy(data, b)
	out := ExtendRequest{Session: s, Offset: off, Count: n}
	for i := range out.Columns {
		out.Columns[i] = data[i*w : (i+1)*w : (i+1)*w]
	}
	*m = out
	return nil
}

// MarshalBinary encodes the reply: header, offset, count, τ_j.
func (m *CorrelatedReply) MarshalBinary() ([]byte, error) {
	if len(m.Tau) > MaxBatch || m.Offset%128 != 0 {
		return nil, fmt.Errorf("encode OT correlated reply: %d OTs at offset %d: %w", len(m.Tau), m.Offset, ErrMalformed)
	}
	b := make([]byte, 0, headerSize+batchSize+BlockSize*len(m.Tau))
	b = putHeader(b, msgCorrelatedReply, &m.Session)
	b = putBatch(b, m.Offset, len(m.Tau))
	for i := range m.Tau {
		b = append(b, m.Tau[i][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a correlated reply.
func (m *CorrelatedReply) UnmarshalBinary(b []byte) error {
	const what = "decode OT correlated reply"
	s, b, err := readHeader(b, msgCorrelatedReply, what)
	if err != nil {
		return err
	}
	off, n, b, err := readBatch(b, what, func(n int) uint64 { return uint64(n) * BlockSize })
	if err != nil {
		return err
	}
	out := CorrelatedReply{Session: s, Offset: off, Tau: make([]Block, n)}
	for j := range out.Tau {
		copy(out.Tau[j][:], b[j*BlockSize:])
	}
	*m = out
	return nil
}

// MarshalBinary encodes the reply: header, offset, count, (y0_j, y1_j).
func (m *ChosenReply) MarshalBinary() ([]byte, error) {
	if len(m.Y) > MaxBatch || m.Offset%128 != 0 {
		return nil, fmt.Errorf("encode OT chosen reply: %d OTs at offset %d: %w", len(m.Y), m.Offset, ErrMalformed)
	}
	b := make([]byte, 0, headerSize+batchSize+2*BlockSize*len(m.Y))
	b = putHeader(b, msgChosenReply, &m.Session)
	b = putBatch(b, m.Offset, len(m.Y))
	for i := range m.Y {
		b = append(b, m.Y[i][0][:]...)
		b = append(b, m.Y[i][1][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a chosen-message reply.
func (m *ChosenReply) UnmarshalBinary(b []byte) error {
	const what = "decode OT chosen reply"
	s, b, err := readHeader(b, msgChosenReply, what)
	if err != nil {
		return err
	}
	off, n, b, err := readBatch(b, what, func(n int) uint64 { return uint64(n) * 2 * BlockSize })
	if err != nil {
		return err
	}
	out := ChosenReply{Session: s, Offset: off, Y: make([][2]Block, n)}
	for j := range out.Y {
		copy(out.Y[j][0][:], b[2*j*BlockSize:])
		copy(out.Y[j][1][:], b[(2*j+1)*BlockSize:])
	}
	*m = out
	return nil
}
