package pda

import (
	"encoding/binary"
	"fmt"
)

// Wire formats. Every message has a fixed layout for a given Suite (group, n_chunks, D,
// count mode), so sizes leak nothing about keys, and every decoder checks the exact length
// before touching an element. Elements use the group's canonical encoding (E bytes),
// scalars S bytes; all integers are big-endian.
//
//	Submission    ver=2 | group | flags | chunks | index(4) | C_Y | C_K×n | [C_V] | R×(1+n) | [(R1_v, R2_v)×|D|] | z×(1+n) | [z_v×|D|] | [e_v×(|D|−1)]
//	BlindedItem   ver | group | flags | chunks | window(8) | C_Y' | C_K'×n | [C_V'] | [C_T]
//	Entry         ver | group | flags | chunks | window(8) | ring_version(8) | entry_id(32) | Y | [Z] | v(2) | E_PRX×n
//	RevealRequest ver | group | chunks | window(8) | request_id(16) | Y | count(2) | E_PRX×n × count
//	RevealResponse ver | window(8) | request_id(16) | count(2) | bitmap(⌈count/8⌉) | klen(2) | canon(k)
//
// A ciphertext is A || B. flags: bit 0 = C_V present, bit 1 = C_T present.

const (
	flagValues = 1 << 0
	flagTag    = 1 << 1

	// MaxRevealEntries bounds the entries of one reveal request (a row's count).
	MaxRevealEntries = 1<<16 - 1
)

func (s *Suite) flags() byte {
	var f byte
	if s.HasValues() {
		f |= flagValues
	}
	if s.hasTag() {
		f |= flagTag
	}
	return f
}

func (s *Suite) ctSize() int { return 2 * s.g.elementSize }

// SubmissionSize is the length of every Submission of this suite.
func (s *Suite) SubmissionSize() int {
	n := int(s.params.Chunks)
	size := 8 + (1+n)*s.ctSize() + s.commitmentsSize() + (1+n)*s.g.scalarSize
	if s.HasValues() {
		size += s.ctSize() + (2*len(s.params.Values)-1)*s.g.scalarSize
	}
	return size
}

// commitmentsSize is the length of a proof's encoded commitments.
func (s *Suite) commitmentsSize() int {
	k := 1 + int(s.params.Chunks)
	if s.HasValues() {
		k += 2 * len(s.params.Values)
	}
	return k * s.g.elementSize
}

// BlindedItemSize is the length of every BlindedItem of this suite.
func (s *Suite) BlindedItemSize() int {
	size := 12 + (1+int(s.params.Chunks))*s.ctSize()
	if s.HasValues() {
		size += s.ctSize()
	}
	if s.hasTag() {
		size += s.ctSize()
	}
	return size
}

// Submission is one participant item (spec A5 "Item") as the proxy parses it.
type Submission struct {
	Index uint32
	CY    Ciphertext
	CK    []Ciphertext
	CV    *Ciphertext
	proof *proof
	cts   []byte // the ciphertext bytes, as hashed into the proof
}

// ParseSubmission decodes and validates a submission's encoding (not its proof).
func (s *Suite) ParseSubmission(b []byte) (*Submission, error) {
	if len(b) != s.SubmissionSize() {
		return nil, fmt.Errorf("%w: submission of %d bytes, want %d", ErrMalformed, len(b), s.SubmissionSize())
	}
	if b[0] != submissionVersion || GroupID(b[1]) != s.g.id || b[2] != s.flags()&flagValues || b[3] != s.params.Chunks {
		return nil, fmt.Errorf("%w: submission header", ErrMalformed)
	}
	n := int(s.params.Chunks)
	sub := &Submission{Index: binary.BigEndian.Uint32(b[4:8])}
	r := reader{b: b[8:]}
	ctBytes := (1 + n) * s.ctSize()
	if s.HasValues() {
		ctBytes += s.ctSize()
	}
	sub.cts = b[8 : 8+ctBytes]
	var err error
	if sub.CY, err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
		return nil, fmt.Errorf("submission C_Y: %w", err)
	}
	sub.CK = make([]Ciphertext, n)
	for i := range sub.CK {
		if sub.CK[i], err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
			return nil, fmt.Errorf("submission C_K[%d]: %w", i, err)
		}
	}
	if s.HasValues() {
		cv, err := s.g.decodeCiphertext(r.next(s.ctSize()))
		if err != nil {
			return nil, fmt.Errorf("submission C_V: %w", err)
		}
		sub.CV = &cv
	}
	pf := &proof{rb: b[8+ctBytes : 8+ctBytes+s.commitmentsSize()]}
	elem := func(what string) (Element, error) {
		e, err := s.g.DecodeElement(r.next(s.g.elementSize))
		if err != nil {
			return nil, fmt.Errorf("submission proof %s: %w", what, err)
		}
		return e, nil
	}
	scalar := func() (Scalar, error) {
		x, err := s.g.DecodeScalar(r.next(s.g.scalarSize))
		if err != nil {
			return nil, fmt.Errorf("submission proof: %w", err)
		}
		return x, nil
	}
	pf.r = make([]Element, 1+n)
	for i := range pf.r {
		if pf.r[i], err = elem("R"); err != nil {
			return nil, err
		}
	}
	nD := 0
	if s.HasValues() {
		nD = len(s.params.Values)
		pf.r1, pf.r2 = make([]Element, nD), make([]Element, nD)
		for d := range nD {
			if pf.r1[d], err = elem("R1"); err != nil {
				return nil, err
			}
			if pf.r2[d], err = elem("R2"); err != nil {
				return nil, err
			}
		}
	}
	pf.z = make([]Scalar, 1+n)
	for i := range pf.z {
		if pf.z[i], err = scalar(); err != nil {
			return nil, err
		}
	}
	if s.HasValues() {
		pf.zv, pf.ev = make([]Scalar, nD), make([]Scalar, nD)
		for d := range nD {
			if pf.zv[d], err = scalar(); err != nil {
				return nil, err
			}
		}
		for d := range nD - 1 { // the last branch challenge is e − Σ e_v
			if pf.ev[d], err = scalar(); err != nil {
				return nil, err
			}
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: submission length", ErrMalformed)
	}
	sub.proof = pf
	return sub, nil
}

func (s *Suite) statement(sub *Submission) *itemStatement {
	st := &itemStatement{xs: make([]Element, 0, 1+len(sub.CK)), cv: sub.CV}
	st.xs = append(st.xs, sub.CY.A)
	for _, c := range sub.CK {
		st.xs = append(st.xs, c.A)
	}
	return st
}

// marshalSubmission encodes cts (already encoded ciphertexts) and the proof.
func (s *Suite) marshalSubmission(index uint32, cts []byte, pf *proof) []byte {
	b := make([]byte, 0, s.SubmissionSize())
	b = append(b, submissionVersion, byte(s.g.id), s.flags()&flagValues, s.params.Chunks)
	b = binary.BigEndian.AppendUint32(b, index)
	b = append(b, cts...)
	b = append(b, pf.rb...)
	for _, z := range pf.z {
		b = s.g.AppendScalar(b, z)
	}
	for _, z := range pf.zv {
		b = s.g.AppendScalar(b, z)
	}
	for d := 0; d+1 < len(pf.ev); d++ {
		b = s.g.AppendScalar(b, pf.ev[d])
	}
	return b
}

// BlindedItem is what the proxy forwards to the DB (spec §3.9.2 step 5): every component
// re-randomised, no participant identifier.
type BlindedItem struct {
	Window uint64
	CY     Ciphertext   // E_DB(Y), Y = F_s(k)
	CK     []Ciphertext // E_{DB·PRX}(k) chunks
	CV     *Ciphertext  // E_DB(g^v) (values mode)
	CT     *Ciphertext  // E_DB(Y^{t_j}) (distinct-participants mode)
}

// MarshalBinary encodes the item.
func (s *Suite) marshalBlindedItem(it *BlindedItem) ([]byte, error) {
	b := make([]byte, 0, s.BlindedItemSize())
	b = append(b, formatVersion, byte(s.g.id), s.flags(), s.params.Chunks)
	b = binary.BigEndian.AppendUint64(b, it.Window)
	var err error
	if b, err = s.g.appendCiphertext(b, it.CY); err != nil {
		return nil, err
	}
	for _, c := range it.CK {
		if b, err = s.g.appendCiphertext(b, c); err != nil {
			return nil, err
		}
	}
	if s.HasValues() {
		if b, err = s.g.appendCiphertext(b, *it.CV); err != nil {
			return nil, err
		}
	}
	if s.hasTag() {
		if b, err = s.g.appendCiphertext(b, *it.CT); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ParseBlindedItem decodes a BlindedItem of this suite.
func (s *Suite) ParseBlindedItem(b []byte) (*BlindedItem, error) {
	if len(b) != s.BlindedItemSize() {
		return nil, fmt.Errorf("%w: blinded item of %d bytes, want %d", ErrMalformed, len(b), s.BlindedItemSize())
	}
	if b[0] != formatVersion || GroupID(b[1]) != s.g.id || b[2] != s.flags() || b[3] != s.params.Chunks {
		return nil, fmt.Errorf("%w: blinded item header", ErrMalformed)
	}
	it := &BlindedItem{Window: binary.BigEndian.Uint64(b[4:12])}
	r := reader{b: b[12:]}
	var err error
	if it.CY, err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
		return nil, fmt.Errorf("blinded item C_Y: %w", err)
	}
	it.CK = make([]Ciphertext, s.params.Chunks)
	for i := range it.CK {
		if it.CK[i], err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
			return nil, fmt.Errorf("blinded item C_K: %w", err)
		}
	}
	if s.HasValues() {
		c, err := s.g.decodeCiphertext(r.next(s.ctSize()))
		if err != nil {
			return nil, fmt.Errorf("blinded item C_V: %w", err)
		}
		it.CV = &c
	}
	if s.hasTag() {
		c, err := s.g.decodeCiphertext(r.next(s.ctSize()))
		if err != nil {
			return nil, fmt.Errorf("blinded item C_T: %w", err)
		}
		it.CT = &c
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: blinded item length", ErrMalformed)
	}
	return it, nil
}

// Entry is what a DB front-end routes to the shard that owns Y (spec A8). It lives only
// inside the DB domain.
type Entry struct {
	Window      uint64
	RingVersion uint64
	ID          [32]byte // SHA-256 of the BlindedItem bytes; never leaves the DB domain
	Y           []byte   // encoded blinded key F_s(k)
	Z           []byte   // encoded dedup tag Y^{t_j} (distinct-participants mode)
	Value       uint16
	Inner       []Ciphertext // E_PRX(k) chunks
}

// EntrySize is the length of every encoded Entry of this suite.
func (s *Suite) EntrySize() int {
	size := 4 + 8 + 8 + 32 + s.g.elementSize + 2 + int(s.params.Chunks)*s.ctSize()
	if s.hasTag() {
		size += s.g.elementSize
	}
	return size
}

// MarshalEntry encodes an entry for the front-end → shard hop.
func (s *Suite) MarshalEntry(e *Entry) ([]byte, error) {
	if len(e.Y) != s.g.elementSize || (s.hasTag() && len(e.Z) != s.g.elementSize) || len(e.Inner) != int(s.params.Chunks) {
		return nil, fmt.Errorf("%w: entry shape", ErrMalformed)
	}
	b := make([]byte, 0, s.EntrySize())
	b = append(b, formatVersion, byte(s.g.id), s.flags(), s.params.Chunks)
	b = binary.BigEndian.AppendUint64(b, e.Window)
	b = binary.BigEndian.AppendUint64(b, e.RingVersion)
	b = append(b, e.ID[:]...)
	b = append(b, e.Y...)
	if s.hasTag() {
		b = append(b, e.Z...)
	}
	b = binary.BigEndian.AppendUint16(b, e.Value)
	var err error
	for _, c := range e.Inner {
		if b, err = s.g.appendCiphertext(b, c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ParseEntry decodes an entry, validating Y, Z and the ciphertexts.
func (s *Suite) ParseEntry(b []byte) (*Entry, error) {
	if len(b) != s.EntrySize() {
		return nil, fmt.Errorf("%w: entry of %d bytes, want %d", ErrMalformed, len(b), s.EntrySize())
	}
	if b[0] != formatVersion || GroupID(b[1]) != s.g.id || b[2] != s.flags() || b[3] != s.params.Chunks {
		return nil, fmt.Errorf("%w: entry header", ErrMalformed)
	}
	e := &Entry{Window: binary.BigEndian.Uint64(b[4:12]), RingVersion: binary.BigEndian.Uint64(b[12:20])}
	copy(e.ID[:], b[20:52])
	r := reader{b: b[52:]}
	e.Y = append([]byte(nil), r.next(s.g.elementSize)...)
	if _, err := s.g.DecodeElement(e.Y); err != nil {
		return nil, fmt.Errorf("entry Y: %w", err)
	}
	if s.hasTag() {
		e.Z = append([]byte(nil), r.next(s.g.elementSize)...)
		if _, err := s.g.DecodeElement(e.Z); err != nil {
			return nil, fmt.Errorf("entry Z: %w", err)
		}
	}
	e.Value = binary.BigEndian.Uint16(r.next(2))
	if s.HasValues() {
		if _, ok := s.valueIndex(e.Value); !ok {
			return nil, fmt.Errorf("entry: %w", ErrValueNotInDomain)
		}
	} else if e.Value != 1 {
		return nil, fmt.Errorf("entry: %w", ErrValueNotInDomain)
	}
	e.Inner = make([]Ciphertext, s.params.Chunks)
	var err error
	for i := range e.Inner {
		if e.Inner[i], err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
			return nil, fmt.Errorf("entry E_PRX: %w", err)
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: entry length", ErrMalformed)
	}
	return e, nil
}

func (s *Suite) valueIndex(v uint16) (int, bool) {
	for i, d := range s.params.Values {
		if d == v {
			return i, true
		}
	}
	return 0, false
}

// RevealRequest is what a shard sends the oracle for a row that satisfies f (spec §3.9.5):
// the blinded key and the row's E_PRX(k) ciphertexts, each re-randomised by the DB under
// h_PRX and in a fresh random order. It carries no entry id, tag, value, batch id or any
// other byte the proxy has seen before (T-PRIV-13); RequestID is fresh randomness.
type RevealRequest struct {
	Window    uint64
	RequestID [RequestIDSize]byte
	Y         []byte
	Entries   [][]Ciphertext // per entry, n_chunks ciphertexts under h_PRX
}

// MarshalRevealRequest encodes a request.
func (s *Suite) MarshalRevealRequest(q *RevealRequest) ([]byte, error) {
	if len(q.Y) != s.g.elementSize || len(q.Entries) == 0 || len(q.Entries) > MaxRevealEntries {
		return nil, fmt.Errorf("%w: reveal request shape", ErrMalformed)
	}
	n := int(s.params.Chunks)
	b := make([]byte, 0, 29+s.g.elementSize+len(q.Entries)*n*s.ctSize())
	b = append(b, formatVersion, byte(s.g.id), s.params.Chunks)
	b = binary.BigEndian.AppendUint64(b, q.Window)
	b = append(b, q.RequestID[:]...)
	b = append(b, q.Y...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(q.Entries)))
	var err error
	for _, ent := range q.Entries {
		if len(ent) != n {
			return nil, fmt.Errorf("%w: reveal entry chunks", ErrMalformed)
		}
		for _, c := range ent {
			if b, err = s.g.appendCiphertext(b, c); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// ParseRevealRequest decodes a request.
func (s *Suite) ParseRevealRequest(b []byte) (*RevealRequest, error) {
	hdr := 3 + 8 + RequestIDSize + s.g.elementSize + 2
	if len(b) < hdr || b[0] != formatVersion || GroupID(b[1]) != s.g.id || b[2] != s.params.Chunks {
		return nil, fmt.Errorf("%w: reveal request header", ErrMalformed)
	}
	q := &RevealRequest{Window: binary.BigEndian.Uint64(b[3:11])}
	copy(q.RequestID[:], b[11:27])
	q.Y = append([]byte(nil), b[27:27+s.g.elementSize]...)
	if _, err := s.g.DecodeElement(q.Y); err != nil {
		return nil, fmt.Errorf("reveal request Y: %w", err)
	}
	count := int(binary.BigEndian.Uint16(b[hdr-2 : hdr]))
	n := int(s.params.Chunks)
	if count == 0 || len(b) != hdr+count*n*s.ctSize() {
		return nil, fmt.Errorf("%w: reveal request length", ErrMalformed)
	}
	r := reader{b: b[hdr:]}
	q.Entries = make([][]Ciphertext, count)
	var err error
	for i := range q.Entries {
		q.Entries[i] = make([]Ciphertext, n)
		for j := range n {
			if q.Entries[i][j], err = s.g.decodeCiphertext(r.next(s.ctSize())); err != nil {
				return nil, fmt.Errorf("reveal request entry %d: %w", i, err)
			}
		}
	}
	return q, nil
}

// RevealResponse is the oracle's answer: the unique consistent key, if any, and one bit
// per request position telling whether that entry decrypted to a key with F_s(key) = Y.
type RevealResponse struct {
	Window     uint64
	RequestID  [RequestIDSize]byte
	Consistent []bool
	Key        Key // zero Key when no entry is consistent
}

// MarshalRevealResponse encodes a response.
func MarshalRevealResponse(r *RevealResponse) ([]byte, error) {
	if len(r.Consistent) == 0 || len(r.Consistent) > MaxRevealEntries {
		return nil, fmt.Errorf("%w: reveal response shape", ErrMalformed)
	}
	b := []byte{formatVersion}
	b = binary.BigEndian.AppendUint64(b, r.Window)
	b = append(b, r.RequestID[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Consistent)))
	bm := make([]byte, (len(r.Consistent)+7)/8)
	for i, ok := range r.Consistent {
		if ok {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, bm...)
	var canon []byte
	if !r.Key.IsZero() {
		canon = r.Key.Canonical()
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(canon)))
	return append(b, canon...), nil
}

// ParseRevealResponse decodes a response; the key must be canonical and present exactly
// when some entry is consistent.
func ParseRevealResponse(b []byte) (*RevealResponse, error) {
	r := reader{b: b}
	hdr := r.next(1 + 8 + RequestIDSize + 2)
	if r.err || hdr[0] != formatVersion {
		return nil, fmt.Errorf("%w: reveal response header", ErrMalformed)
	}
	resp := &RevealResponse{Window: binary.BigEndian.Uint64(hdr[1:9])}
	copy(resp.RequestID[:], hdr[9:25])
	count := int(binary.BigEndian.Uint16(hdr[25:27]))
	bm := r.next((count + 7) / 8)
	kl := r.next(2)
	if r.err || count == 0 {
		return nil, fmt.Errorf("%w: reveal response length", ErrMalformed)
	}
	canon := r.next(int(binary.BigEndian.Uint16(kl)))
	if !r.done() {
		return nil, fmt.Errorf("%w: reveal response length", ErrMalformed)
	}
	if count%8 != 0 && bm[len(bm)-1]>>(count%8) != 0 {
		return nil, fmt.Errorf("%w: reveal response bitmap padding", ErrMalformed)
	}
	any := false
	resp.Consistent = make([]bool, count)
	for i := range resp.Consistent {
		resp.Consistent[i] = bm[i/8]>>(i%8)&1 == 1
		any = any || resp.Consistent[i]
	}
	if len(canon) > 0 {
		k, err := ParseCanonicalKey(canon)
		if err != nil {
			return nil, fmt.Errorf("reveal response key: %w", err)
		}
		resp.Key = k
	}
	if any == resp.Key.IsZero() {
		return nil, fmt.Errorf("%w: reveal response key and bitmap disagree", ErrMalformed)
	}
	return resp, nil
}
