package ot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

var batchSizes = []int{0, 1, 7, 127, 128, 129, 1000, 10_000}

func TestTransposeMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{128, 256, 640} {
		var cols [Kappa][]byte
		for i := range cols {
			cols[i] = make([]byte, n/8)
			for k := range cols[i] {
				cols[i][k] = byte(rng.Uint32())
			}
		}
		rows := make([]Block, n)
		transposeColumns(rows, &cols)
		for j := range n {
			for i := range Kappa {
				if got, want := rows[j][i/8]>>(i%8)&1, cols[i][j/8]>>(j%8)&1; got != want {
					t.Fatalf("n=%d: row %d bit %d = %d, column %d bit %d = %d", n, j, i, got, i, j, want)
				}
			}
		}
	}
}

// TestRandomOTReceiverGetsChosenMessageOnly: for random choice bits and every batch size,
// one after another in one session, the receiver's message is m_c and differs from m_{1-c}.
func TestRandomOTReceiverGetsChosenMessageOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s, r := pair(t, nil)
	for _, n := range batchSizes {
		c := randomChoices(rng, n)
		sb, rb := extend(t, s, r, c, n)
		m0, m1, err := sb.Random()
		if err != nil {
			t.Fatal(err)
		}
		got, err := rb.Random()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n || len(m0) != n || len(m1) != n {
			t.Fatalf("n=%d: %d/%d/%d messages", n, len(got), len(m0), len(m1))
		}
		for j := range n {
			ms := [2]Block{m0[j], m1[j]}
			if got[j] != ms[bit(c, j)] {
				t.Fatalf("n=%d OT %d: receiver's message is not m_c", n, j)
			}
			if got[j] == ms[1-bit(c, j)] {
				t.Fatalf("n=%d OT %d: receiver's message equals m_(1-c)", n, j)
			}
		}
	}
}

// TestCorrelatedOTPairsDifferByDelta: the sender's pairs are (m0, m0⊕Δ), so with lsb(Δ)=1
// their permute bits differ (free-XOR labels); the receiver gets m0⊕c·Δ and never the other.
func TestCorrelatedOTPairsDifferByDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s, r := pair(t, nil)
	for _, n := range batchSizes {
		var delta Block
		for i := range delta {
			delta[i] = byte(rng.Uint32())
		}
		delta[0] |= 1
		c := randomChoices(rng, n)
		sb, rb := extend(t, s, r, c, n)
		m0, reply, err := sb.Correlated(delta)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rb.Correlated(wire(t, reply))
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			ms := [2]Block{m0[j], xorBlock(m0[j], delta)}
			if ms[0].Lsb() == ms[1].Lsb() {
				t.Fatalf("n=%d OT %d: permute bits equal", n, j)
			}
			if got[j] != ms[bit(c, j)] || got[j] == ms[1-bit(c, j)] {
				t.Fatalf("n=%d OT %d: receiver got %x, want m_%d", n, j, got[j], bit(c, j))
			}
		}
	}
}

func TestChosenOTDeliversChosenMessageOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s, r := pair(t, nil)
	for _, n := range batchSizes {
		m0, m1 := make([]Block, n), make([]Block, n)
		for j := range n {
			m0[j][0], m0[j][1] = byte(j), 0
			m1[j][0], m1[j][1] = byte(j), 1
		}
		c := randomChoices(rng, n)
		sb, rb := extend(t, s, r, c, n)
		reply, err := sb.Chosen(m0, m1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rb.Chosen(wire(t, reply))
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			want, other := m0[j], m1[j]
			if bit(c, j) == 1 {
				want, other = other, want
			}
			if got[j] != want || got[j] == other {
				t.Fatalf("n=%d OT %d: got %x, want %x", n, j, got[j], want)
			}
		}
	}
}

// TestMessagesNeverRepeatAcrossBatches: two batches of a session use distinct tweaks and
// keystream, so no sender message repeats.
func TestMessagesNeverRepeatAcrossBatches(t *testing.T) {
	s, r := pair(t, nil)
	seen := map[Block]bool{}
	for range 3 {
		sb, _ := extend(t, s, r, make([]byte, 32), 256)
		m0, m1, err := sb.Random()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(m0, m1...) {
			if seen[m] {
				t.Fatal("a sender message repeats")
			}
			seen[m] = true
		}
	}
}

// TestRequestColumnsLookUniform: the sender's view, the columns u_i, has as many ones for
// all-zero choices as for all-one choices (about half), a sanity check that the request is
// masked by the PRG.
func TestRequestColumnsLookUniform(t *testing.T) {
	s, r := pair(t, nil)
	const n = 8192
	for _, fill := range []byte{0x00, 0xFF} {
		req, _, err := r.Extend(bytes.Repeat([]byte{fill}, n/8), n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Extend(req); err != nil {
			t.Fatal(err)
		}
		ones := 0
		for i := range req.Columns {
			for _, x := range req.Columns[i] {
				for ; x != 0; x &= x - 1 {
					ones++
				}
			}
		}
		if frac := float64(ones) / (Kappa * n); frac < 0.49 || frac > 0.51 {
			t.Fatalf("choices %#x: %.4f of the request's bits are ones", fill, frac)
		}
	}
}

func TestSenderRefusesBatchesOutOfOrder(t *testing.T) {
	s, r := pair(t, nil)
	req1, _, _ := r.Extend([]byte{1}, 3)
	req2, _, _ := r.Extend([]byte{2}, 3)
	if _, err := s.Extend(req2); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("skipped batch: %v, want ErrOutOfOrder", err)
	}
	if _, err := s.Extend(req1); err != nil {
		t.Fatalf("first batch after a refused one: %v", err)
	}
	if _, err := s.Extend(req1); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("replayed batch: %v, want ErrOutOfOrder", err)
	}
	other, _ := pair(t, nil)
	if _, err := other.Extend(req2); !errors.Is(err, ErrSession) {
		t.Fatalf("batch of another session: %v, want ErrSession", err)
	}
}

func TestReceiverRefusesMismatchedReplies(t *testing.T) {
	s, r := pair(t, nil)
	sb1, rb1 := extend(t, s, r, []byte{5}, 4)
	sb2, rb2 := extend(t, s, r, []byte{5}, 4)
	_, reply1, _ := sb1.Correlated(Block{1})
	_, reply2, _ := sb2.Correlated(Block{1})
	if _, err := rb2.Correlated(reply1); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("reply of another batch: %v, want ErrOutOfOrder", err)
	}
	bad := *reply2
	bad.Session[0] ^= 1
	if _, err := rb2.Correlated(&bad); !errors.Is(err, ErrSession) {
		t.Fatalf("reply of another session: %v, want ErrSession", err)
	}
	short := *reply2
	short.Tau = short.Tau[:3]
	if _, err := rb2.Correlated(&short); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("short reply: %v, want ErrOutOfOrder", err)
	}
	if _, err := rb1.Correlated(reply1); err != nil {
		t.Fatal(err)
	}
	if _, err := rb1.Correlated(reply1); !errors.Is(err, ErrBatchUsed) {
		t.Fatalf("batch used twice (receiver): %v, want ErrBatchUsed", err)
	}
	if _, _, err := sb1.Random(); !errors.Is(err, ErrBatchUsed) {
		t.Fatalf("batch used twice (sender): %v, want ErrBatchUsed", err)
	}
}

func TestExtendRejectsBadChoices(t *testing.T) {
	_, r := pair(t, nil)
	for _, tc := range []struct {
		c []byte
		n int
	}{{nil, 1}, {[]byte{0}, 9}, {[]byte{0x02}, 1}, {[]byte{0}, -1}, {nil, MaxBatch + 1}} {
		if _, _, err := r.Extend(tc.c, tc.n); err == nil {
			t.Errorf("Extend(%x, %d) accepted", tc.c, tc.n)
		}
	}
	r2, _, _ := NewReceiver(nil)
	if _, _, err := r2.Extend(nil, 0); err == nil {
		t.Error("Extend before Finish accepted")
	}
}

// validMessages returns one encoding of each message type, from a real session.
func validMessages(t testing.TB) map[string][]byte {
	r, setup, err := NewReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := NewSender(nil, setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	req, _, _ := r.Extend([]byte{0x55, 0x01}, 9)
	sb, _ := s.Extend(req)
	_, cr, _ := sb.Correlated(Block{1})
	req2, _, _ := r.Extend([]byte{0x03}, 3)
	sb2, _ := s.Extend(req2)
	ch, _ := sb2.Chosen(make([]Block, 3), make([]Block, 3))
	out := map[string][]byte{}
	for name, m := range map[string]interface{ MarshalBinary() ([]byte, error) }{
		"setup": setup, "setup-reply": reply, "extend": req, "correlated": cr, "chosen": ch,
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

func decoderFor(name string) interface{ UnmarshalBinary([]byte) error } {
	switch name {
	case "setup":
		return new(Setup)
	case "setup-reply":
		return new(SetupReply)
	case "extend":
		return new(ExtendRequest)
	case "correlated":
		return new(CorrelatedReply)
	}
	return new(ChosenReply)
}

func TestDecodersRejectMalformed(t *testing.T) {
	msgs := validMessages(t)
	for name, b := range msgs {
		mutate := map[string][]byte{
			"empty":         nil,
			"truncated":     b[:len(b)-1],
			"trailing byte": append(append([]byte(nil), b...), 0),
			"wrong type":    append([]byte{b[0] ^ 0x40}, b[1:]...),
			"wrong version": append([]byte{b[0], 2}, b[2:]...),
			"header only":   b[:headerSize],
		}
		switch name {
		case "setup":
			var id [PointSize]byte
			mutate["identity A"] = append(append([]byte(nil), b[:headerSize]...), id[:]...)
			ff := bytes.Repeat([]byte{0xFF}, PointSize)
			mutate["non-canonical A"] = append(append([]byte(nil), b[:headerSize]...), ff...)
		case "setup-reply":
			x := append([]byte(nil), b...)
			clear(x[headerSize+5*PointSize : headerSize+6*PointSize])
			mutate["identity B_5"] = x
		default:
			x := append([]byte(nil), b...)
			x[headerSize] = 1 // offset 1: not a multiple of 128
			mutate["unaligned offset"] = x
			y := append([]byte(nil), b...)
			y[headerSize+8] += 200 // more OTs than the payload holds (past a 128 boundary for the request)
			mutate["count too large"] = y
			z := append([]byte(nil), b...)
			z[headerSize+11] = 0xFF // count above MaxBatch
			mutate["count above MaxBatch"] = z
		}
		for what, m := range mutate {
			if err := decoderFor(name).UnmarshalBinary(m); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s, %s: %v, want ErrMalformed", name, what, err)
			}
		}
		if err := decoderFor(name).UnmarshalBinary(b); err != nil {
			t.Errorf("%s: valid message rejected: %v", name, err)
		}
	}
}

func TestSenderRejectsMalformedRequest(t *testing.T) {
	s, r := pair(t, nil)
	req, _, _ := r.Extend([]byte{1, 0}, 16)
	bad := *req
	bad.Columns[7] = bad.Columns[7][:3]
	if _, err := s.Extend(&bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short column: %v, want ErrMalformed", err)
	}
	if _, err := s.Extend(req); err != nil {
		t.Fatalf("the valid request after a malformed one: %v", err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/transcript.sha256")

// TestTranscriptKnownAnswer fixes the wire format and every derivation (base-OT keys, π key,
// column PRG, transposition, hash): with a deterministic randomness source, the SHA-256 of
// all messages and outputs of a session with two batches equals testdata/transcript.sha256.
func TestTranscriptKnownAnswer(t *testing.T) {
	rnd := newDetReader(42)
	h := sha256.New()
	r, setup, err := NewReceiver(rnd)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := NewSender(rnd, setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	for _, m := range []interface{ MarshalBinary() ([]byte, error) }{setup, reply} {
		b, _ := m.MarshalBinary()
		h.Write(b)
	}
	for _, n := range []int{130, 5} {
		c := make([]byte, (n+7)/8)
		rnd.Read(c)
		if n%8 != 0 {
			c[len(c)-1] &= 1<<(n%8) - 1
		}
		req, rb, err := r.Extend(c, n)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := s.Extend(req)
		if err != nil {
			t.Fatal(err)
		}
		m0, cr, err := sb.Correlated(Block{0x0d, 0xe1, 0x7a})
		if err != nil {
			t.Fatal(err)
		}
		got, err := rb.Correlated(cr)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []interface{ MarshalBinary() ([]byte, error) }{req, cr} {
			b, _ := m.MarshalBinary()
			h.Write(b)
		}
		for j := range m0 {
			h.Write(m0[j][:])
			h.Write(got[j][:])
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	const path = "testdata/transcript.sha256"
	if *update {
		if err := os.WriteFile(path, []byte(sum+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum != strings.TrimSpace(string(want)) {
		t.Fatalf("transcript hash %s, want %s", sum, want)
	}
}
