package ot

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cloudflare/circl/group"
)

// PointSize is a compressed ristretto255 element.
const PointSize = 32

// SessionID names one base-OT setup and every extension batch built on it.
type SessionID [16]byte

var g = group.Ristretto255

// Domain-separation strings of the hashes; one per use.
const (
	dstBaseKey = "obscura/ot/v1/base-key"
	dstPiKey   = "obscura/ot/v1/pi-key"
	dstScalar  = "obscura/ot/v1/scalar"
)

// randomScalar draws a non-zero scalar from rnd. circl's ristretto255 RandomScalar ignores
// its reader, so the scalar is hashed from 64 bytes of rnd instead: the caller's source is
// then the only one (and the known-answer test can fix it).
func randomScalar(rnd io.Reader) (group.Scalar, error) {
	var buf [64]byte
	defer clear(buf[:])
	for {
		if _, err := io.ReadFull(rnd, buf[:]); err != nil {
			return nil, err
		}
		if k := g.HashToScalar(buf[:], []byte(dstScalar)); !k.IsZero() {
			return k, nil
		}
	}
}

func randReader(rnd io.Reader) io.Reader {
	if rnd == nil {
		return rand.Reader
	}
	return rnd
}

func marshalPoint(dst *[PointSize]byte, e group.Element) {
	b, err := e.MarshalBinaryCompress()
	if err != nil || len(b) != PointSize {
		panic(fmt.Sprintf("ot: ristretto255 encoding of %d bytes: %v", len(b), err)) // unreachable
	}
	copy(dst[:], b)
}

// unmarshalPoint decodes a canonical, non-identity point.
func unmarshalPoint(b *[PointSize]byte) (group.Element, error) {
	e := g.NewElement()
	if err := e.UnmarshalBinary(b[:]); err != nil {
		return nil, fmt.Errorf("point does not decode: %w", ErrMalformed)
	}
	if e.IsIdentity() {
		return nil, fmt.Errorf("identity point: %w", ErrMalformed)
	}
	return e, nil
}

// baseKey is the key of base OT i: SHA-256 of the session, i, A, B_i and the shared point,
// truncated to an AES-128 key (the column PRG's key).
func baseKey(session *SessionID, i int, a, b *[PointSize]byte, p group.Element) cipher.Block {
	var pb [PointSize]byte
	marshalPoint(&pb, p)
	h := sha256.New()
	h.Write([]byte(dstBaseKey))
	h.Write(session[:])
	h.Write(binary.LittleEndian.AppendUint32(nil, uint32(i)))
	h.Write(a[:])
	h.Write(b[:])
	h.Write(pb[:])
	var sum [32]byte
	h.Sum(sum[:0])
	c, err := aes.NewCipher(sum[:16])
	if err != nil {
		panic("ot: AES-128 with a 16-byte key: " + err.Error()) // unreachable
	}
	clear(sum[:])
	clear(pb[:])
	return c
}

// piKey fixes π for the session from the whole base-OT transcript, so neither side chooses
// it alone.
func piKey(session *SessionID, a *[PointSize]byte, bs *[Kappa][PointSize]byte) crHash {
	h := sha256.New()
	h.Write([]byte(dstPiKey))
	h.Write(session[:])
	h.Write(a[:])
	for i := range bs {
		h.Write(bs[i][:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	var k [16]byte
	copy(k[:], sum[:16])
	return newCRHash(&k)
}

// NewReceiver starts a session on the Receiver's side (the Broker). In the base OTs the roles
// are swapped: the Receiver is the Chou–Orlandi sender, so it draws a and sends A = aG. rnd
// nil means crypto/rand.
func NewReceiver(rnd io.Reader) (*Receiver, *Setup, error) {
	rnd = randReader(rnd)
	r := &Receiver{}
	if _, err := io.ReadFull(rnd, r.session[:]); err != nil {
		return nil, nil, fmt.Errorf("ot: draw session id: %w", err)
	}
	a, err := randomScalar(rnd)
	if err != nil {
		return nil, nil, fmt.Errorf("ot: draw a: %w", err)
	}
	r.a = a
	marshalPoint(&r.aPoint, g.NewElement().MulGen(r.a))
	return r, &Setup{Session: r.session, A: r.aPoint}, nil
}

// NewSender answers a Setup on the Sender's side (the Garbler), which is the Chou–Orlandi
// receiver with the secret choice string s: B_i = b_i·G + s_i·A, and its key for base OT i
// is derived from b_i·A. rnd nil means crypto/rand.
func NewSender(rnd io.Reader, m *Setup) (*Sender, *SetupReply, error) {
	rnd = randReader(rnd)
	A, err := unmarshalPoint(&m.A)
	if err != nil {
		return nil, nil, fmt.Errorf("ot: setup: A: %w", err)
	}
	s := &Sender{session: m.Session}
	if _, err := io.ReadFull(rnd, s.s[:]); err != nil {
		return nil, nil, fmt.Errorf("ot: draw s: %w", err)
	}
	reply := &SetupReply{Session: m.Session}
	B, B1, P := g.NewElement(), g.NewElement(), g.NewElement()
	for i := range Kappa {
		b, err := randomScalar(rnd)
		if err != nil {
			return nil, nil, fmt.Errorf("ot: draw b_%d: %w", i, err)
		}
		B.MulGen(b)
		B1.Add(B, A)
		B.CMov(int(s.s[i/8]>>(i%8)&1), B1)
		marshalPoint(&reply.B[i], B)
		P.Mul(A, b)
		s.keys[i] = baseKey(&m.Session, i, &m.A, &reply.B[i], P)
		b.SetUint64(0)
	}
	P.Set(g.Identity())
	s.h = piKey(&m.Session, &m.A, &reply.B)
	return s, reply, nil
}

// Finish completes the Receiver's setup with the Sender's reply: k_i^0 from a·B_i and k_i^1
// from a·(B_i − A). The scalar a is erased.
func (r *Receiver) Finish(m *SetupReply) error {
	if r.ready || r.a == nil {
		return fmt.Errorf("ot: finish: setup already finished")
	}
	if m.Session != r.session {
		return fmt.Errorf("ot: finish: %w", ErrSession)
	}
	A, err := unmarshalPoint(&r.aPoint)
	if err != nil {
		return fmt.Errorf("ot: finish: own A: %w", err) // unreachable
	}
	negA := g.NewElement().Neg(A)
	P, D := g.NewElement(), g.NewElement()
	var keys [Kappa][2]cipher.Block
	for i := range Kappa {
		B, err := unmarshalPoint(&m.B[i])
		if err != nil {
			return fmt.Errorf("ot: finish: B_%d: %w", i, err)
		}
		P.Mul(B, r.a)
		keys[i][0] = baseKey(&r.session, i, &r.aPoint, &m.B[i], P)
		P.Mul(D.Add(B, negA), r.a)
		keys[i][1] = baseKey(&r.session, i, &r.aPoint, &m.B[i], P)
	}
	P.Set(g.Identity())
	r.keys = keys
	r.h = piKey(&r.session, &r.aPoint, &m.B)
	r.a.SetUint64(0)
	r.a = nil
	r.ready = true
	return nil
}
