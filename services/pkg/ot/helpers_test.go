package ot

import (
	"encoding"
	"io"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20"
)

// detReader is a deterministic randomness source (ChaCha20 keystream) for known-answer
// tests; never for anything else.
type detReader struct{ c *chacha20.Cipher }

func newDetReader(seed byte) io.Reader {
	var key [32]byte
	key[0] = seed
	c, err := chacha20.NewUnauthenticatedCipher(key[:], make([]byte, 12))
	if err != nil {
		panic(err)
	}
	return &detReader{c}
}

func (d *detReader) Read(p []byte) (int, error) {
	clear(p)
	d.c.XORKeyStream(p, p)
	return len(p), nil
}

// wire sends m through its encoding, as the services do over gRPC.
func wire[T any, PT interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}](t testing.TB, m PT) PT {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := PT(new(T))
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return out
}

// pair runs the base OTs through the wire encoding and returns both sides of a session.
func pair(t testing.TB, rnd io.Reader) (*Sender, *Receiver) {
	t.Helper()
	r, setup, err := NewReceiver(rnd)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := NewSender(rnd, wire(t, setup))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(wire(t, reply)); err != nil {
		t.Fatal(err)
	}
	return s, r
}

func randomChoices(rng *rand.Rand, n int) []byte {
	c := make([]byte, (n+7)/8)
	for j := range n {
		c[j/8] |= byte(rng.IntN(2)) << (j % 8)
	}
	return c
}

func bit(c []byte, j int) int { return int(c[j/8] >> (j % 8) & 1) }

// extend runs one batch's request through the wire and returns both halves.
func extend(t testing.TB, s *Sender, r *Receiver, choices []byte, n int) (*SenderBatch, *ReceiverBatch) {
	t.Helper()
	req, rb, err := r.Extend(choices, n)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.Extend(wire(t, req))
	if err != nil {
		t.Fatal(err)
	}
	return sb, rb
}
