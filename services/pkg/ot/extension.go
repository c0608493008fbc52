package ot

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"fmt"

	"github.com/cloudflare/circl/group"
)

// MaxBatch bounds the OTs of one extension batch: its request is 16 B per OT (64 MiB at
// the bound), far above the paper's largest application (82,944 input bits).
const MaxBatch = 1 << 22

// padded is n rounded up to a multiple of 128: the extension matrix is transposed in
// 128×128 tiles, and a batch's column PRG starts on an AES block boundary.
func padded(n int) int { return (n + 127) &^ 127 }

// Receiver is the OT-extension receiver (the Broker). It is not safe for concurrent use:
// batches of a session are numbered by their offset and must reach the Sender in the order
// Extend made them.
type Receiver struct {
	session SessionID
	a       group.Scalar // erased by Finish
	aPoint  [PointSize]byte
	keys    [Kappa][2]cipher.Block
	h       crHash
	next    uint64
	ready   bool
}

// Sender is the OT-extension sender (the Garbler): it holds s and k_i^{s_i}. It is not safe
// for concurrent use.
type Sender struct {
	session SessionID
	s       Block
	keys    [Kappa]cipher.Block
	h       crHash
	next    uint64
}

// Session is the session id.
func (r *Receiver) Session() SessionID { return r.session }

// Session is the session id.
func (s *Sender) Session() SessionID { return s.session }

// prgColumn XORs into dst (a whole number of AES blocks) the AES-128-CTR keystream of key k
// from the 128-bit big-endian counter offset/128: column i of every batch continues one
// stream, so no keystream block is used twice in a session.
func prgColumn(k cipher.Block, offset uint64, dst []byte) {
	var iv [16]byte
	binary.BigEndian.PutUint64(iv[8:], offset/128)
	cipher.NewCTR(k, iv[:]).XORKeyStream(dst, dst)
}

// ReceiverBatch is the Receiver's half of one batch: its choice bits and the rows t_j. Its
// outputs are taken once, by one of Random, Correlated or Chosen.
type ReceiverBatch struct {
	session SessionID
	offset  uint64
	done    bool
	n       int
	choices []byte
	t       []Block
	h       crHash
}

// Len is the number of OTs of the batch.
func (b *ReceiverBatch) Len() int { return b.n }

// Extend makes a batch of n OTs with the given choice bits (bit j of the batch is bit j%8 of
// choices[j/8]; ⌈n/8⌉ bytes, padding bits zero). It returns the request for the Sender and
// the batch that turns the Sender's reply into the chosen messages.
func (r *Receiver) Extend(choices []byte, n int) (*ExtendRequest, *ReceiverBatch, error) {
	if !r.ready {
		return nil, nil, fmt.Errorf("ot: extend before the setup finished")
	}
	if n < 0 || n > MaxBatch {
		return nil, nil, fmt.Errorf("ot: extend %d OTs (at most %d)", n, MaxBatch)
	}
	if len(choices) != (n+7)/8 || (n%8 != 0 && choices[len(choices)-1]>>(n%8) != 0) {
		return nil, nil, fmt.Errorf("ot: extend %d OTs with %d choice bytes (padding bits must be zero)", n, len(choices))
	}
	N := padded(n)
	if r.next+uint64(N) < r.next {
		return nil, nil, fmt.Errorf("ot: session exhausted")
	}
	rbits := make([]byte, N/8)
	copy(rbits, choices)
	req := &ExtendRequest{Session: r.session, Offset: r.next, Count: n}
	var tcols [Kappa][]byte
	mem := make([]byte, 2*Kappa*N/8)
	for i := range Kappa {
		t := mem[2*i*N/8 : (2*i+1)*N/8]
		u := mem[(2*i+1)*N/8 : (2*i+2)*N/8]
		prgColumn(r.keys[i][0], r.next, t)
		subtle.XORBytes(u, t, rbits)
		prgColumn(r.keys[i][1], r.next, u)
		tcols[i], req.Columns[i] = t, u
	}
	rows := make([]Block, N)
	transposeColumns(rows, &tcols)
	for i := range tcols {
		clear(tcols[i])
	}
	clear(rows[n:])
	b := &ReceiverBatch{session: r.session, offset: r.next, n: n, choices: rbits, t: rows[:n], h: r.h}
	r.next += uint64(N)
	return req, b, nil
}

// SenderBatch is the Sender's half of one batch: the rows q_j = t_j ⊕ r_j·s. Its outputs are
// taken once, by one of Random, Correlated or Chosen.
type SenderBatch struct {
	session SessionID
	offset  uint64
	done    bool
	q       []Block
	s       Block
	h       crHash
}

// Len is the number of OTs of the batch.
func (b *SenderBatch) Len() int { return len(b.q) }

// Extend takes the Receiver's next request: q_i = G(k_i^{s_i}) ⊕ s_i·u_i for every column,
// then the rows. A request of another session or not at the session's next offset is
// refused (ErrSession, ErrOutOfOrder) and does not move the session.
func (s *Sender) Extend(req *ExtendRequest) (*SenderBatch, error) {
	if req.Session != s.session {
		return nil, fmt.Errorf("ot: extend: %w", ErrSession)
	}
	if req.Offset != s.next {
		return nil, fmt.Errorf("ot: extend: batch at offset %d, expected %d: %w", req.Offset, s.next, ErrOutOfOrder)
	}
	if err := req.check(); err != nil {
		return nil, fmt.Errorf("ot: extend: %w", err)
	}
	N := padded(req.Count)
	var qcols [Kappa][]byte
	mem := make([]byte, Kappa*N/8)
	for i := range Kappa {
		q := mem[i*N/8 : (i+1)*N/8]
		prgColumn(s.keys[i], s.next, q)
		xorMasked(q, req.Columns[i], s.s[i/8]>>(i%8)&1)
		qcols[i] = q
	}
	rows := make([]Block, N)
	transposeColumns(rows, &qcols)
	clear(mem)
	clear(rows[req.Count:])
	b := &SenderBatch{session: s.session, offset: s.next, q: rows[:req.Count], s: s.s, h: s.h}
	s.next += uint64(N)
	return b, nil
}

// xorMasked sets dst ^= bit·src without a branch on the secret bit.
func xorMasked(dst, src []byte, bit byte) {
	m := -uint64(bit & 1)
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d := binary.LittleEndian.Uint64(dst[i:])
		binary.LittleEndian.PutUint64(dst[i:], d^binary.LittleEndian.Uint64(src[i:])&m)
	}
	for ; i < len(dst); i++ {
		dst[i] ^= src[i] & byte(m)
	}
}

// pads returns H(q_j, j) and H(q_j ⊕ s, j) for every OT j of the batch: the sender's random
// OT messages, from which the other flavours are built. It erases the rows.
func (b *SenderBatch) pads() (p0, p1 []Block, err error) {
	if b.done {
		return nil, nil, ErrBatchUsed
	}
	b.done = true
	n := len(b.q)
	p0, p1 = make([]Block, n), make([]Block, n)
	for j := range b.q {
		p1[j] = xorBlock(b.q[j], b.s)
	}
	b.h.hash(p0, b.q, b.offset)
	b.h.hash(p1, p1, b.offset)
	clear(b.q)
	b.q = nil
	clear(b.s[:])
	return p0, p1, nil
}

// Random returns the random OT messages: the receiver of OT j gets m[c_j][j].
func (b *SenderBatch) Random() (m0, m1 []Block, err error) {
	return b.pads()
}

// Correlated makes correlated OTs for the sender's Δ: the sender's messages are m0[j] and
// m0[j] ⊕ Δ, and the reply carries τ_j = H(q_j) ⊕ H(q_j⊕s) ⊕ Δ (16 B per OT) from which the
// Receiver computes its message. Garbled-circuit input labels under free-XOR are exactly
// such pairs.
func (b *SenderBatch) Correlated(delta Block) (m0 []Block, reply *CorrelatedReply, err error) {
	off := b.offset
	p0, p1, err := b.pads()
	if err != nil {
		return nil, nil, err
	}
	tau := p1
	for j := range tau {
		subtle.XORBytes(tau[j][:], tau[j][:], p0[j][:])
		subtle.XORBytes(tau[j][:], tau[j][:], delta[:])
	}
	return p0, &CorrelatedReply{Session: b.session, Offset: off, Tau: tau}, nil
}

// Chosen makes chosen-message OTs: the Receiver of OT j gets m0[j] or m1[j] by its choice.
// The reply is 32 B per OT.
func (b *SenderBatch) Chosen(m0, m1 []Block) (*ChosenReply, error) {
	if b.done {
		return nil, ErrBatchUsed
	}
	if len(m0) != len(b.q) || len(m1) != len(b.q) {
		return nil, fmt.Errorf("ot: chosen OT with %d and %d messages for a batch of %d", len(m0), len(m1), len(b.q))
	}
	off := b.offset
	p0, p1, err := b.pads()
	if err != nil {
		return nil, err
	}
	y := make([][2]Block, len(p0))
	for j := range y {
		y[j][0] = xorBlock(p0[j], m0[j])
		y[j][1] = xorBlock(p1[j], m1[j])
	}
	clear(p0)
	clear(p1)
	return &ChosenReply{Session: b.session, Offset: off, Y: y}, nil
}

// pad returns H(t_j, j) for every OT, the receiver's random-OT message. It erases the rows.
func (b *ReceiverBatch) pad() ([]Block, error) {
	if b.done {
		return nil, ErrBatchUsed
	}
	b.done = true
	out := make([]Block, b.n)
	b.h.hash(out, b.t, b.offset)
	clear(b.t)
	b.t = nil
	return out, nil
}

func (b *ReceiverBatch) choice(j int) byte { return b.choices[j/8] >> (j % 8) & 1 }

// Random returns the receiver's random-OT messages m[c_j][j].
func (b *ReceiverBatch) Random() ([]Block, error) { return b.pad() }

// Correlated returns m0[j] ⊕ c_j·Δ from the Sender's correlated reply.
func (b *ReceiverBatch) Correlated(reply *CorrelatedReply) ([]Block, error) {
	if reply.Session != b.session {
		return nil, fmt.Errorf("ot: correlated reply: %w", ErrSession)
	}
	if reply.Offset != b.offset || len(reply.Tau) != b.n {
		return nil, fmt.Errorf("ot: correlated reply for offset %d with %d OTs, batch at %d has %d: %w",
			reply.Offset, len(reply.Tau), b.offset, b.n, ErrOutOfOrder)
	}
	out, err := b.pad()
	if err != nil {
		return nil, err
	}
	for j := range out {
		t := maskBlock(reply.Tau[j], b.choice(j))
		subtle.XORBytes(out[j][:], out[j][:], t[:])
	}
	return out, nil
}

// Chosen returns m_{c_j}[j] from the Sender's chosen-message reply.
func (b *ReceiverBatch) Chosen(reply *ChosenReply) ([]Block, error) {
	if reply.Session != b.session {
		return nil, fmt.Errorf("ot: chosen reply: %w", ErrSession)
	}
	if reply.Offset != b.offset || len(reply.Y) != b.n {
		return nil, fmt.Errorf("ot: chosen reply for offset %d with %d OTs, batch at %d has %d: %w",
			reply.Offset, len(reply.Y), b.offset, b.n, ErrOutOfOrder)
	}
	out, err := b.pad()
	if err != nil {
		return nil, err
	}
	for j := range out {
		c := b.choice(j)
		y := xorBlock(maskBlock(reply.Y[j][0], 1^c), maskBlock(reply.Y[j][1], c))
		subtle.XORBytes(out[j][:], out[j][:], y[:])
	}
	return out, nil
}
