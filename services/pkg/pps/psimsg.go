package pps

import (
	"encoding/binary"
	"fmt"
)

// The messages of the OPRF-PSI consistency check between Broker and Garbler (D16a). All
// integers are little-endian; every message starts with its type and version byte and the
// execution it belongs to. Decoders check every length before allocating, so a message can
// cost at most its own size.
const (
	psiVersion = 1

	msgPSIRequest   = 0x51
	msgPSIResponse  = 0x52
	msgInconsistent = 0x53
	psiHeaderSize   = 2 + len(ExecID{}) // type, version, exec
	psiCountSize    = 4
	elementSize     = 32 // compressed ristretto255
	// TagSize is the truncated OPRF output compared in the intersection. 128 bits keeps a
	// false match below 2^-90 even for 2^19 × 2^20 comparisons (the statistical λ=40 of
	// spec §6 needs far less).
	TagSize = 16
	// MaxPSIElements bounds one check: 2^24 input bits (524,288 values), far above the
	// paper's largest application (82,944 bits).
	MaxPSIElements = 1 << 24
	// MaxPSIResponseSize bounds an encoded PSIResponse: the Broker's evaluated elements and
	// two tags per position. A transport must accept messages of this size.
	MaxPSIResponseSize = psiHeaderSize + 2*psiCountSize + MaxPSIElements*(elementSize+2*TagSize)
)

// PSIRequest is the Broker's first message: the PSI seed s2 (shared "with the first message
// of the PSI protocol", paper §4.2), the positions it holds labels for, in ascending order,
// and one blinded OPRF element per position, in the same order.
type PSIRequest struct {
	Exec      ExecID
	S2        Seed
	Positions []Position
	Blinded   [][elementSize]byte
}

// PSIResponse is the Garbler's answer: the evaluated elements in request order, and the
// tags of R_G = {w0⊕r_pos, w1⊕r_pos} in strictly ascending order — sorted so that the order
// does not tell the Broker whether its label was w0 or w1.
type PSIResponse struct {
	Exec      ExecID
	Evaluated [][elementSize]byte
	Tags      [][TagSize]byte
}

// InconsistentSlots is the Broker's report after the check: the slots with at least one
// inconsistent label, ascending, for the Garbler to nullify (spec §3.4 step 7, §8.4).
type InconsistentSlots struct {
	Exec  ExecID
	Slots []uint32
}

func putHeader(b []byte, typ byte, exec *ExecID) []byte {
	b = append(b, typ, psiVersion)
	return append(b, exec[:]...)
}

func readHeader(b []byte, typ byte, what string) (ExecID, []byte, error) {
	var exec ExecID
	if len(b) < psiHeaderSize {
		return exec, nil, fmt.Errorf("%s: %d bytes, shorter than the header: %w", what, len(b), ErrMalformed)
	}
	if b[0] != typ || b[1] != psiVersion {
		return exec, nil, fmt.Errorf("%s: type %#x version %d, want %#x version %d: %w", what, b[0], b[1], typ, psiVersion, ErrMalformed)
	}
	copy(exec[:], b[2:psiHeaderSize])
	return exec, b[psiHeaderSize:], nil
}

// readCount reads a count of items of itemSize bytes and checks that many are present.
func readCount(b []byte, itemSize int, what string) (int, []byte, error) {
	if len(b) < psiCountSize {
		return 0, nil, fmt.Errorf("%s: truncated count: %w", what, ErrMalformed)
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[psiCountSize:]
	if n > MaxPSIElements {
		return 0, nil, fmt.Errorf("%s: %d items, at most %d: %w", what, n, MaxPSIElements, ErrMalformed)
	}
	if uint64(len(b)) < uint64(n)*uint64(itemSize) {
		return 0, nil, fmt.Errorf("%s: %d items need %d bytes, %d left: %w", what, n, uint64(n)*uint64(itemSize), len(b), ErrMalformed)
	}
	return int(n), b, nil
}

// MarshalBinary encodes the request: header, s2, count n, n positions, n elements.
func (m *PSIRequest) MarshalBinary() ([]byte, error) {
	if len(m.Positions) != len(m.Blinded) || len(m.Positions) > MaxPSIElements {
		return nil, fmt.Errorf("encode PSI request: %d positions, %d elements: %w", len(m.Positions), len(m.Blinded), ErrMalformed)
	}
	b := make([]byte, 0, psiHeaderSize+SeedSize+psiCountSize+len(m.Positions)*(4+elementSize))
	b = putHeader(b, msgPSIRequest, &m.Exec)
	b = append(b, m.S2[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Positions)))
	for _, p := range m.Positions {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
	}
	for i := range m.Blinded {
		b = append(b, m.Blinded[i][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a request, requiring the exact length and strictly ascending
// positions.
func (m *PSIRequest) UnmarshalBinary(b []byte) error {
	const what = "decode PSI request"
	exec, b, err := readHeader(b, msgPSIRequest, what)
	if err != nil {
		return err
	}
	if len(b) < SeedSize {
		return fmt.Errorf("%s: truncated seed: %w", what, ErrMalformed)
	}
	var s2 Seed
	copy(s2[:], b)
	n, b, err := readCount(b[SeedSize:], 4+elementSize, what)
	if err != nil {
		return err
	}
	if len(b) != n*(4+elementSize) {
		return fmt.Errorf("%s: %d trailing bytes: %w", what, len(b)-n*(4+elementSize), ErrMalformed)
	}
	pos := make([]Position, n)
	for i := range pos {
		pos[i] = Position(binary.LittleEndian.Uint32(b[4*i:]))
		if i > 0 && pos[i] <= pos[i-1] {
			return fmt.Errorf("%s: positions not strictly ascending at %d: %w", what, i, ErrMalformed)
		}
	}
	b = b[4*n:]
	blinded := make([][elementSize]byte, n)
	for i := range blinded {
		copy(blinded[i][:], b[elementSize*i:])
	}
	*m = PSIRequest{Exec: exec, S2: s2, Positions: pos, Blinded: blinded}
	return nil
}

// MarshalBinary encodes the response: header, count n, n elements, count m, m tags.
func (m *PSIResponse) MarshalBinary() ([]byte, error) {
	if len(m.Evaluated) > MaxPSIElements || len(m.Tags) > 2*MaxPSIElements {
		return nil, fmt.Errorf("encode PSI response: %d elements, %d tags: %w", len(m.Evaluated), len(m.Tags), ErrMalformed)
	}
	b := make([]byte, 0, psiHeaderSize+2*psiCountSize+len(m.Evaluated)*elementSize+len(m.Tags)*TagSize)
	b = putHeader(b, msgPSIResponse, &m.Exec)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Evaluated)))
	for i := range m.Evaluated {
		b = append(b, m.Evaluated[i][:]...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Tags)))
	for i := range m.Tags {
		b = append(b, m.Tags[i][:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a response, requiring the exact length and strictly ascending
// tags (a Garbler that did not sort would leak which label each wire holds).
func (m *PSIResponse) UnmarshalBinary(b []byte) error {
	const what = "decode PSI response"
	exec, b, err := readHeader(b, msgPSIResponse, what)
	if err != nil {
		return err
	}
	n, b, err := readCount(b, elementSize, what)
	if err != nil {
		return err
	}
	evaluated := make([][elementSize]byte, n)
	for i := range evaluated {
		copy(evaluated[i][:], b[elementSize*i:])
	}
	b = b[n*elementSize:]
	if len(b) < psiCountSize {
		return fmt.Errorf("%s: truncated tag count: %w", what, ErrMalformed)
	}
	nt := binary.LittleEndian.Uint32(b)
	b = b[psiCountSize:]
	if nt > 2*MaxPSIElements || uint64(len(b)) != uint64(nt)*TagSize {
		return fmt.Errorf("%s: %d tags in %d bytes: %w", what, nt, len(b), ErrMalformed)
	}
	tags := make([][TagSize]byte, nt)
	for i := range tags {
		copy(tags[i][:], b[TagSize*i:])
		if i > 0 && string(tags[i][:]) <= string(tags[i-1][:]) {
			return fmt.Errorf("%s: tags not strictly ascending at %d: %w", what, i, ErrMalformed)
		}
	}
	*m = PSIResponse{Exec: exec, Evaluated: evaluated, Tags: tags}
	return nil
}

// MarshalBinary encodes the report: header, count, slots.
func (m *InconsistentSlots) MarshalBinary() ([]byte, error) {
	if len(m.Slots) > MaxPSIElements {
		return nil, fmt.Errorf("encode inconsistent slots: %d slots: %w", len(m.Slots), ErrMalformed)
	}
	b := make([]byte, 0, psiHeaderSize+psiCountSize+4*len(m.Slots))
	b = putHeader(b, msgInconsistent, &m.Exec)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Slots)))
	for _, s := range m.Slots {
		b = binary.LittleEndian.AppendUint32(b, s)
	}
	return b, nil
}

// UnmarshalBinary decodes a report, requiring the exact length and strictly ascending slots.
func (m *InconsistentSlots) UnmarshalBinary(b []byte) error {
	const what = "decode inconsistent slots"
	exec, b, err := readHeader(b, msgInconsistent, what)
	if err != nil {
		return err
	}
	n, b, err := readCount(b, 4, what)
	if err != nil {
		return err
	}
	if len(b) != 4*n {
		return fmt.Errorf("%s: %d trailing bytes: %w", what, len(b)-4*n, ErrMalformed)
	}
	slots := make([]uint32, n)
	for i := range slots {
		slots[i] = binary.LittleEndian.Uint32(b[4*i:])
		if i > 0 && slots[i] <= slots[i-1] {
			return fmt.Errorf("%s: slots not strictly ascending at %d: %w", what, i, ErrMalformed)
		}
	}
	*m = InconsistentSlots{Exec: exec, Slots: slots}
	return nil
}
