package ot

// KKRT16 batched related-key OPRF (Kolesnikov–Kumaresan–Rosulek–Trieu, CCS 2016, §3–4) for
// the wire-label consistency check of PPS (spec §3.4, §8.4, D16b). It is IKNP with wide rows:
// instead of the receiver's choice bit r_j repeated across a 128-bit row, row j carries the
// codeword C(x_j) of its 128-bit input under a pseudorandom code C: {0,1}^128 → {0,1}^512.
// With base-OT keys as in IKNP (the Sender, here the Garbler, is the base-OT receiver with a
// secret s ∈ {0,1}^512), the Receiver (the Broker) ends with rows t_j and the Sender with
// q_j = t_j ⊕ (C(x_j) ∧ s). Instance j of the OPRF is
//
//	F_j(y) = H(j, q_j ⊕ (C(y) ∧ s)),
//
// which the Sender can evaluate on any y and the Receiver only on its own x_j, as H(j, t_j).
// For y ≠ x_j the Receiver would need the bits of s where C(y) and C(x_j) differ; with a
// 512-bit pseudorandom code those are ≥ 128 bits except with probability below 2^-90 per
// pair (a random 512-bit string has weight ≤ 128 with probability ≈ 2^-96.7), so F_j(y) is
// pseudorandom to it (KKRT16 Theorem 2 with H a random oracle).
//
// Decisions. Width 512 = 4 × Kappa, so the 512 base OTs are four ordinary base-OT sessions of
// this package (base.go) whose keys and choice strings are concatenated; the column PRG, the
// 128×128 transposition and the message checks are the IKNP ones. The Receiver sends its
// matrix as rows u_j = t_j ⊕ t'_j ⊕ C(x_j) (64 B per OT, unpadded) rather than columns: the
// relation is linear, so the Sender transposes its own PRG columns and adds u_j ∧ s row by
// row. The code is C(x) = AES_{K_0}(x) ‖ … ‖ AES_{K_3}(x) with the K_i fresh per batch from
// SHA-256(session, offset, i) — a PRF, so a fixed set of inputs gets independent random
// codewords (KKRT's pseudorandom code); nobody outside the session knows the session id when
// the inputs are fixed. H is SHA-256 over (domain, session, index offset+j, 64-byte row),
// truncated to 128 bits; the index is unique per OT in the session, so H is never queried on
// the same instance twice. Security is semi-honest, as the IKNP of this package: a Receiver
// that sends rows that are not of the form t ⊕ t' ⊕ C(x) can learn bits of s.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
)

// KKRTWidth is the width k of the KKRT extension in bits: the code length and the number
// of base OTs.
const KKRTWidth = 4 * Kappa

// WideSize is KKRTWidth/8, one row of the KKRT matrix in bytes.
const WideSize = KKRTWidth / 8

// kkrtGroups is the number of Kappa-wide base-OT sessions behind one KKRT session.
const kkrtGroups = KKRTWidth / Kappa

// MaxKKRTBatch bounds the OPRF instances of one batch: its request is 64 B per instance
// (64 MiB at the bound). With 64-bit tags compared against two per instance, a false match
// anywhere in a batch stays below 2^-43.
const MaxKKRTBatch = 1 << 20

// Wide is one row of the KKRT matrix: bit i is bit i%8 of byte i/8 (bit i%128 of block
// i/128).
type Wide [kkrtGroups]Block

// Domain-separation strings of the KKRT hashes.
const (
	dstKKRTCode = "obscura/ot/v1/kkrt-code"
	dstKKRTHash = "obscura/ot/v1/kkrt-hash"
)

// KKRTReceiver is the OPRF receiver (the Broker): it evaluates F_j on its own inputs only.
// It is not safe for concurrent use; batches must reach the Sender in the order Encode made
// them.
type KKRTReceiver struct {
	session SessionID
	base    [kkrtGroups]*Receiver
	next    uint64
	ready   bool
}

// KKRTSender is the OPRF sender (the Garbler): it holds s and can evaluate every instance
// on any input. It is not safe for concurrent use.
type KKRTSender struct {
	session SessionID
	base    [kkrtGroups]*Sender
	s       Wide
	next    uint64
}

// Session is the KKRT session id.
func (r *KKRTReceiver) Session() SessionID { return r.session }

// Session is the KKRT session id.
func (s *KKRTSender) Session() SessionID { return s.session }

// NewKKRTReceiver starts a session on the Receiver's side: a fresh session id and four
// base-OT setups (the Receiver is the base-OT sender, as in IKNP). rnd nil means
// crypto/rand.
func NewKKRTReceiver(rnd io.Reader) (*KKRTReceiver, *KKRTSetup, error) {
	rnd = randReader(rnd)
	r := &KKRTReceiver{}
	if _, err := io.ReadFull(rnd, r.session[:]); err != nil {
		return nil, nil, fmt.Errorf("ot: kkrt: draw session id: %w", err)
	}
	m := &KKRTSetup{Session: r.session}
	for g := range r.base {
		br, setup, err := NewReceiver(rnd)
		if err != nil {
			return nil, nil, fmt.Errorf("ot: kkrt: base OTs %d: %w", g, err)
		}
		r.base[g], m.Base[g] = br, *setup
	}
	return r, m, nil
}

// NewKKRTSender answers a KKRTSetup: the four base-OT replies, with s the concatenation of
// the four base sessions' choice strings. rnd nil means crypto/rand.
func NewKKRTSender(rnd io.Reader, m *KKRTSetup) (*KKRTSender, *KKRTSetupReply, error) {
	rnd = randReader(rnd)
	s := &KKRTSender{session: m.Session}
	reply := &KKRTSetupReply{Session: m.Session}
	for g := range s.base {
		bs, br, err := NewSender(rnd, &m.Base[g])
		if err != nil {
			return nil, nil, fmt.Errorf("ot: kkrt: base OTs %d: %w", g, err)
		}
		s.base[g], reply.Base[g], s.s[g] = bs, *br, bs.s
	}
	return s, reply, nil
}

// Finish completes the Receiver's setup with the Sender's reply.
func (r *KKRTReceiver) Finish(m *KKRTSetupReply) error {
	if r.ready {
		return fmt.Errorf("ot: kkrt: finish: setup already finished")
	}
	if m.Session != r.session {
		return fmt.Errorf("ot: kkrt: finish: %w", ErrSession)
	}
	for g := range r.base {
		if err := r.base[g].Finish(&m.Base[g]); err != nil {
			return fmt.Errorf("ot: kkrt: finish base OTs %d: %w", g, err)
		}
	}
	r.ready = true
	return nil
}

// kkrtCode is the pseudorandom code of one batch.
type kkrtCode [kkrtGroups]cipher.Block

func newKKRTCode(session *SessionID, offset uint64) kkrtCode {
	var c kkrtCode
	for i := range c {
		h := sha256.New()
		h.Write([]byte(dstKKRTCode))
		h.Write(session[:])
		h.Write(binary.LittleEndian.AppendUint64(nil, offset))
		h.Write([]byte{byte(i)})
		var sum [32]byte
		h.Sum(sum[:0])
		k, err := aes.NewCipher(sum[:16])
		if err != nil {
			panic("ot: AES-128 with a 16-byte key: " + err.Error()) // unreachable
		}
		c[i] = k
	}
	return c
}

// encode sets dst = C(x).
func (c *kkrtCode) encode(dst *Wide, x *Block) {
	for i := range c {
		c[i].Encrypt(dst[i][:], x[:])
	}
}

// kkrtHasher computes H(index, row) into a reusable buffer: domain, session, index, row.
type kkrtHasher struct {
	buf [len(dstKKRTHash) + len(SessionID{}) + 8 + WideSize]byte
}

func newKKRTHasher(session *SessionID) *kkrtHasher {
	h := &kkrtHasher{}
	copy(h.buf[:], dstKKRTHash)
	copy(h.buf[len(dstKKRTHash):], session[:])
	return h
}

func (h *kkrtHasher) hash(index uint64, row *Wide) Block {
	const at = len(dstKKRTHash) + len(SessionID{})
	binary.LittleEndian.PutUint64(h.buf[at:], index)
	copy(h.buf[at+8:], wideBytes(row))
	sum := sha256.Sum256(h.buf[:])
	var out Block
	copy(out[:], sum[:])
	clear(h.buf[at+8:])
	return out
}

func wideBytes(w *Wide) []byte { return blockBytes(w[:]) }

// transposeWide sets rows[j] (len(rows) a multiple of 128) from the KKRTWidth columns
// cols[i], each len(rows)/8 bytes, reusing the Kappa-wide transposition per group.
func transposeWide(rows []Wide, cols *[KKRTWidth][]byte, scratch []Block) {
	for g := range kkrtGroups {
		transposeColumns(scratch, (*[Kappa][]byte)(cols[g*Kappa:(g+1)*Kappa]))
		for j := range rows {
			rows[j][g] = scratch[j]
		}
	}
	clear(scratch)
}

// KKRTReceiverBatch is the Receiver's half of one batch: the rows t_j. Its outputs are
// taken once.
type KKRTReceiverBatch struct {
	session SessionID
	offset  uint64
	done    bool
	t       []Wide
}

// Len is the number of OPRF instances of the batch.
func (b *KKRTReceiverBatch) Len() int { return len(b.t) }

// Encode makes a batch with one OPRF instance per input (instance j evaluates inputs[j]).
// It returns the request for the Sender and the batch whose Outputs are F_j(inputs[j]).
func (r *KKRTReceiver) Encode(inputs []Block) (*KKRTRequest, *KKRTReceiverBatch, error) {
	if !r.ready {
		return nil, nil, fmt.Errorf("ot: kkrt: encode before the setup finished")
	}
	n := len(inputs)
	if n > MaxKKRTBatch {
		return nil, nil, fmt.Errorf("ot: kkrt: encode %d inputs (at most %d)", n, MaxKKRTBatch)
	}
	N := padded(n)
	if r.next+uint64(N) < r.next {
		return nil, nil, fmt.Errorf("ot: kkrt: session exhausted")
	}
	// Columns of G(k_i^0) (→ t) and G(k_i^0) ⊕ G(k_i^1) (→ t ⊕ t').
	var c0, c01 [KKRTWidth][]byte
	mem := make([]byte, 2*KKRTWidth*N/8)
	for g := range r.base {
		for i := range Kappa {
			w := g*Kappa + i
			a := mem[2*w*N/8 : (2*w+1)*N/8]
			d := mem[(2*w+1)*N/8 : (2*w+2)*N/8]
			prgColumn(r.base[g].keys[i][0], r.next, a)
			copy(d, a)
			prgColumn(r.base[g].keys[i][1], r.next, d)
			c0[w], c01[w] = a, d
		}
	}
	t := make([]Wide, N)
	u := make([]Wide, N)
	scratch := make([]Block, N)
	transposeWide(t, &c0, scratch)
	transposeWide(u, &c01, scratch)
	clear(mem)
	code := newKKRTCode(&r.session, r.next)
	var cw Wide
	for j := range inputs {
		code.encode(&cw, &inputs[j])
		subtle.XORBytes(wideBytes(&u[j]), wideBytes(&u[j]), wideBytes(&cw))
	}
	clear(cw[:])
	clear(t[n:])
	clear(u[n:])
	req := &KKRTRequest{Session: r.session, Offset: r.next, Rows: u[:n:n]}
	b := &KKRTReceiverBatch{session: r.session, offset: r.next, t: t[:n:n]}
	r.next += uint64(N)
	return req, b, nil
}

// Outputs returns F_j(x_j) = H(offset+j, t_j) for every instance and erases the rows.
func (b *KKRTReceiverBatch) Outputs() ([]Block, error) {
	if b.done {
		return nil, ErrBatchUsed
	}
	b.done = true
	h := newKKRTHasher(&b.session)
	out := make([]Block, len(b.t))
	for j := range b.t {
		out[j] = h.hash(b.offset+uint64(j), &b.t[j])
	}
	clear(b.t)
	b.t = nil
	return out, nil
}

// Erase drops the rows without taking the outputs (a check abandoned on a bad response).
func (b *KKRTReceiverBatch) Erase() {
	b.done = true
	clear(b.t)
	b.t = nil
}

// KKRTSenderBatch is the Sender's half of one batch: the rows q_j, s and the batch's code.
// Eval may be called any number of times until Erase.
type KKRTSenderBatch struct {
	session SessionID
	offset  uint64
	q       []Wide
	s       Wide
	code    kkrtCode
}

// Len is the number of OPRF instances of the batch.
func (b *KKRTSenderBatch) Len() int { return len(b.q) }

// Offset is the batch's offset in the session.
func (b *KKRTSenderBatch) Offset() uint64 { return b.offset }

// Extend takes the Receiver's next request: per group, the PRG columns of k_i^{s_i}
// transposed to rows, plus u_j ∧ s. A request of another session or not at the session's
// next offset is refused (ErrSession, ErrOutOfOrder) and does not move the session.
func (s *KKRTSender) Extend(req *KKRTRequest) (*KKRTSenderBatch, error) {
	if req.Session != s.session {
		return nil, fmt.Errorf("ot: kkrt: extend: %w", ErrSession)
	}
	if req.Offset != s.next {
		return nil, fmt.Errorf("ot: kkrt: extend: batch at offset %d, expected %d: %w", req.Offset, s.next, ErrOutOfOrder)
	}
	if err := req.check(); err != nil {
		return nil, fmt.Errorf("ot: kkrt: extend: %w", err)
	}
	n := len(req.Rows)
	N := padded(n)
	var cols [KKRTWidth][]byte
	mem := make([]byte, KKRTWidth*N/8)
	for g := range s.base {
		for i := range Kappa {
			w := g*Kappa + i
			c := mem[w*N/8 : (w+1)*N/8]
			prgColumn(s.base[g].keys[i], s.next, c)
			cols[w] = c
		}
	}
	q := make([]Wide, N)
	transposeWide(q, &cols, make([]Block, N))
	clear(mem)
	q = q[:n:n]
	var m Wide
	for j := range q {
		andWide(&m, &req.Rows[j], &s.s)
		subtle.XORBytes(wideBytes(&q[j]), wideBytes(&q[j]), wideBytes(&m))
	}
	clear(m[:])
	b := &KKRTSenderBatch{session: s.session, offset: s.next, q: q, s: s.s, code: newKKRTCode(&s.session, s.next)}
	s.next += uint64(N)
	return b, nil
}

// andWide sets dst = a ∧ b.
func andWide(dst, a, b *Wide) {
	d, x, y := wideBytes(dst), wideBytes(a), wideBytes(b)
	for i := 0; i < WideSize; i += 8 {
		binary.LittleEndian.PutUint64(d[i:], binary.LittleEndian.Uint64(x[i:])&binary.LittleEndian.Uint64(y[i:]))
	}
}

// Eval sets out[j] = F_j(ys[j]) for every instance j of the batch (len(ys) == Len()).
func (b *KKRTSenderBatch) Eval(out, ys []Block) error {
	if b.q == nil && len(ys) != 0 {
		return ErrBatchUsed
	}
	if len(ys) != len(b.q) || len(out) != len(ys) {
		return fmt.Errorf("ot: kkrt: eval %d inputs into %d outputs for a batch of %d", len(ys), len(out), len(b.q))
	}
	h := newKKRTHasher(&b.session)
	var cw, row Wide
	for j := range ys {
		b.code.encode(&cw, &ys[j])
		andWide(&row, &cw, &b.s)
		subtle.XORBytes(wideBytes(&row), wideBytes(&row), wideBytes(&b.q[j]))
		out[j] = h.hash(b.offset+uint64(j), &row)
	}
	clear(cw[:])
	clear(row[:])
	return nil
}

// Erase drops the batch's rows and s; Eval fails afterwards.
func (b *KKRTSenderBatch) Erase() {
	clear(b.q)
	b.q = nil
	clear(b.s[:])
}
