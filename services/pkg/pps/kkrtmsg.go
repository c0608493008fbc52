package pps

import (
	"encoding/binary"
	"fmt"

	"github.com/obscura-iot/obscura/services/pkg/ot"
)

// The messages of the KKRT consistency check (D16b), in the framing of psimsg.go. The
// base-OT setup travels as ot.KKRTSetup and ot.KKRTSetupReply, once per session.
const (
	msgKKRTCheckRequest  = 0x54
	msgKKRTCheckResponse = 0x55

	// KKRTTagSize is the truncated OPRF value the Garbler sends per label. The Broker
	// compares its value with the two of its own position only, so a false match anywhere
	// in a check of n ≤ ot.MaxKKRTBatch positions has probability ≤ 2n·2^-64 ≤ 2^-43, below
	// the statistical λ = 40 of spec §6.
	KKRTTagSize = 8
	// MaxKKRTPositions bounds one KKRT check.
	MaxKKRTPositions = ot.MaxKKRTBatch
	// MaxKKRTRequestSize and MaxKKRTResponseSize bound the encoded messages; a transport
	// must accept messages of these sizes.
	MaxKKRTRequestSize  = psiHeaderSize + psiCountSize + MaxKKRTPositions*4 + kkrtOTRequestOverhead + MaxKKRTPositions*ot.WideSize
	MaxKKRTResponseSize = psiHeaderSize + len(ot.SessionID{}) + 8 + psiCountSize + MaxKKRTPositions*2*KKRTTagSize

	kkrtOTRequestOverhead = 2 + len(ot.SessionID{}) + 8 + 4 // ot header, offset, count
)

// KKRTTag is one truncated OPRF value.
type KKRTTag [KKRTTagSize]byte

// KKRTCheckRequest is the Broker's message for one check: the positions it holds labels
// for, strictly ascending, and the OPRF extension request with one instance per position in
// the same order.
type KKRTCheckRequest struct {
	Exec      ExecID
	Positions []Position
	OT        ot.KKRTRequest
}

// KKRTCheckResponse is the Garbler's answer: for each requested position, the tags of its
// two labels in ascending order — sorted so that the order does not tell the Broker whether
// its label was w0 or w1. Session and Offset name the extension batch it answers.
type KKRTCheckResponse struct {
	Exec    ExecID
	Session ot.SessionID
	Offset  uint64
	Tags    [][2]KKRTTag
}

// MarshalBinary encodes the request: header, count n, n positions, the OT request.
func (m *KKRTCheckRequest) MarshalBinary() ([]byte, error) {
	if len(m.Positions) != len(m.OT.Rows) || len(m.Positions) > MaxKKRTPositions {
		return nil, fmt.Errorf("encode KKRT check request: %d positions, %d OPRF rows: %w", len(m.Positions), len(m.OT.Rows), ErrMalformed)
	}
	o, err := m.OT.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("encode KKRT check request: %w: %w", err, ErrMalformed)
	}
	b := make([]byte, 0, psiHeaderSize+psiCountSize+4*len(m.Positions)+len(o))
	b = putHeader(b, msgKKRTCheckRequest, &m.Exec)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Positions)))
	for _, p := range m.Positions {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
	}
	return append(b, o...), nil
}

// UnmarshalBinary decodes a request, requiring strictly ascending positions and one OPRF
// row per position.
func (m *KKRTCheckRequest) UnmarshalBinary(b []byte) error {
	const what = "decode KKRT check request"
	exec, b, err := readHeader(b, msgKKRTCheckRequest, what)
	if err != nil {
		return err
	}
	n, b, err := readCount(b, 4, what)
	if err != nil {
		return err
	}
	if n > MaxKKRTPositions {
		return fmt.Errorf("%s: %d positions, at most %d: %w", what, n, MaxKKRTPositions, ErrMalformed)
	}
	pos := make([]Position, n)
	for i := range pos {
		pos[i] = Position(binary.LittleEndian.Uint32(b[4*i:]))
		if i > 0 && pos[i] <= pos[i-1] {
			return fmt.Errorf("%s: positions not strictly ascending at %d: %w", what, i, ErrMalformed)
		}
	}
	var req ot.KKRTRequest
	if err := req.UnmarshalBinary(b[4*n:]); err != nil {
		return fmt.Errorf("%s: %w: %w", what, err, ErrMalformed)
	}
	if len(req.Rows) != n {
		return fmt.Errorf("%s: %d positions, %d OPRF rows: %w", what, n, len(req.Rows), ErrMalformed)
	}
	*m = KKRTCheckRequest{Exec: exec, Positions: pos, OT: req}
	return nil
}

// MarshalBinary encodes the response: header, session, offset, count n, n tag pairs.
func (m *KKRTCheckResponse) MarshalBinary() ([]byte, error) {
	if len(m.Tags) > MaxKKRTPositions {
		return nil, fmt.Errorf("encode KKRT check response: %d tag pairs: %w", len(m.Tags), ErrMalformed)
	}
	b := make([]byte, 0, psiHeaderSize+len(m.Session)+8+psiCountSize+2*KKRTTagSize*len(m.Tags))
	b = putHeader(b, msgKKRTCheckResponse, &m.Exec)
	b = append(b, m.Session[:]...)
	b = binary.LittleEndian.AppendUint64(b, m.Offset)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Tags)))
	for i := range m.Tags {
		b = append(b, m.Tags[i][0][:]...)
		b = append(b, m.Tags[i][1][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a response, requiring the exact length and every pair in
// ascending order (a Garbler that did not sort would tell which label each wire holds).
func (m *KKRTCheckResponse) UnmarshalBinary(b []byte) error {
	const what = "decode KKRT check response"
	exec, b, err := readHeader(b, msgKKRTCheckResponse, what)
	if err != nil {
		return err
	}
	var out KKRTCheckResponse
	out.Exec = exec
	if len(b) < len(out.Session)+8 {
		return fmt.Errorf("%s: truncated batch: %w", what, ErrMalformed)
	}
	copy(out.Session[:], b)
	out.Offset = binary.LittleEndian.Uint64(b[len(out.Session):])
	n, b, err := readCount(b[len(out.Session)+8:], 2*KKRTTagSize, what)
	if err != nil {
		return err
	}
	if n > MaxKKRTPositions || len(b) != 2*KKRTTagSize*n {
		return fmt.Errorf("%s: %d tag pairs in %d bytes: %w", what, n, len(b), ErrMalformed)
	}
	out.Tags = make([][2]KKRTTag, n)
	for i := range out.Tags {
		copy(out.Tags[i][0][:], b[2*KKRTTagSize*i:])
		copy(out.Tags[i][1][:], b[2*KKRTTagSize*i+KKRTTagSize:])
		if !tagPairSorted(&out.Tags[i]) {
			return fmt.Errorf("%s: tag pair %d not in ascending order: %w", what, i, ErrMalformed)
		}
	}
	*m = out
	return nil
}

func tagPairSorted(p *[2]KKRTTag) bool { return string(p[0][:]) <= string(p[1][:]) }
