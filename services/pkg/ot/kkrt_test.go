package ot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// kkrtPair runs the KKRT base OTs through the wire encoding.
func kkrtPair(t testing.TB) (*KKRTSender, *KKRTReceiver) {
	t.Helper()
	r, setup, err := NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := NewKKRTSender(nil, wire(t, setup))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(wire(t, reply)); err != nil {
		t.Fatal(err)
	}
	return s, r
}

func randomBlocks(rng *rand.Rand, n int) []Block {
	out := make([]Block, n)
	for j := range out {
		for i := range out[j] {
			out[j][i] = byte(rng.Uint32())
		}
	}
	return out
}

// kkrtBatch encodes inputs and runs the request through the wire to the sender.
func kkrtBatch(t testing.TB, s *KKRTSender, r *KKRTReceiver, inputs []Block) (*KKRTSenderBatch, []Block) {
	t.Helper()
	req, rb, err := r.Encode(inputs)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.Extend(wire(t, req))
	if err != nil {
		t.Fatal(err)
	}
	out, err := rb.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	return sb, out
}

// TestKKRTOPRFMatchesOnSameInputOnly: for every batch size, one after another in one
// session, the receiver's F_j(x_j) equals the sender's F_j(x_j), and the sender's value on
// any other input (a random one, one bit flipped, another instance's input) differs.
func TestKKRTOPRFMatchesOnSameInputOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	s, r := kkrtPair(t)
	for _, n := range []int{0, 1, 127, 128, 129, 10_000} {
		x := randomBlocks(rng, n)
		sb, got := kkrtBatch(t, s, r, x)
		if len(got) != n || sb.Len() != n {
			t.Fatalf("n=%d: %d outputs, sender batch of %d", n, len(got), sb.Len())
		}
		same := make([]Block, n)
		if err := sb.Eval(same, x); err != nil {
			t.Fatal(err)
		}
		flipped := make([]Block, n)
		for j := range flipped {
			flipped[j] = x[j]
			flipped[j][rng.IntN(BlockSize)] ^= 1 << rng.IntN(8)
		}
		others := [][]Block{randomBlocks(rng, n), flipped}
		if n > 1 {
			others = append(others, append(x[1:n:n], x[0])) // another instance's input
		}
		outs := make([][]Block, len(others))
		for k, y := range others {
			outs[k] = make([]Block, n)
			if err := sb.Eval(outs[k], y); err != nil {
				t.Fatal(err)
			}
		}
		for j := range n {
			if got[j] != same[j] {
				t.Fatalf("n=%d instance %d: receiver's F(x) differs from sender's F(x)", n, j)
			}
			for k := range outs {
				if outs[k][j] == got[j] {
					t.Fatalf("n=%d instance %d: F(y) for y≠x (kind %d) equals F(x)", n, j, k)
				}
			}
		}
		sb.Erase()
		if n > 0 {
			if err := sb.Eval(same, x); !errors.Is(err, ErrBatchUsed) {
				t.Fatalf("Eval after Erase: %v", err)
			}
		}
	}
}

// TestKKRTTranscriptKnownAnswer fixes the KKRT wire format and every derivation (the four
// base-OT sessions, column PRG, wide transposition, code keys, hash): with a deterministic
// randomness source, the SHA-256 of all messages and OPRF values of a session with two
// batches (the receiver's outputs, the sender's on the same and on other inputs) equals
// testdata/kkrt_transcript.sha256 (-update rewrites it).
func TestKKRTTranscriptKnownAnswer(t *testing.T) {
	rnd := newDetReader(43)
	h := sha256.New()
	r, setup, err := NewKKRTReceiver(rnd)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := NewKKRTSender(rnd, setup)
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
		x, y := make([]Block, n), make([]Block, n)
		rnd.Read(blockBytes(x))
		rnd.Read(blockBytes(y))
		req, rb, err := r.Encode(x)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := s.Extend(req)
		if err != nil {
			t.Fatal(err)
		}
		fx, fy := make([]Block, n), make([]Block, n)
		if err := sb.Eval(fx, x); err != nil {
			t.Fatal(err)
		}
		if err := sb.Eval(fy, y); err != nil {
			t.Fatal(err)
		}
		got, err := rb.Outputs()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := req.MarshalBinary()
		h.Write(b)
		h.Write(blockBytes(got))
		h.Write(blockBytes(fx))
		h.Write(blockBytes(fy))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	const path = "testdata/kkrt_transcript.sha256"
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

// TestKKRTInstancesAreIndependent: the same input in two instances, or in the same instance
// position of two batches, gives unrelated outputs (the index and the batch's code are in
// every value).
func TestKKRTInstancesAreIndependent(t *testing.T) {
	s, r := kkrtPair(t)
	x := []Block{{7}, {7}}
	_, a := kkrtBatch(t, s, r, x)
	_, b := kkrtBatch(t, s, r, x)
	if a[0] == a[1] || a[0] == b[0] || a[1] == b[1] {
		t.Fatal("repeated OPRF output across instances or batches")
	}
}

func TestKKRTReceiverOutputsOnce(t *testing.T) {
	_, r := kkrtPair(t)
	_, rb, err := r.Encode([]Block{{1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Outputs(); err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Outputs(); !errors.Is(err, ErrBatchUsed) {
		t.Fatalf("second Outputs: %v", err)
	}
}

func TestKKRTSenderRefusesOtherSessionAndOrder(t *testing.T) {
	s, r := kkrtPair(t)
	req1, _, err := r.Encode(randomBlocks(rand.New(rand.NewPCG(1, 1)), 3))
	if err != nil {
		t.Fatal(err)
	}
	req2, _, err := r.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	req3, _, err := r.Encode([]Block{{1}})
	if err != nil {
		t.Fatal(err)
	}
	if req2.Offset != 128 || req3.Offset != 128 {
		t.Fatalf("offsets %d, %d: an empty batch must not move the session", req2.Offset, req3.Offset)
	}
	if _, err := s.Extend(req3); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("batch ahead of its turn: %v", err)
	}
	other := *req1
	other.Session[0] ^= 1
	if _, err := s.Extend(&other); !errors.Is(err, ErrSession) {
		t.Fatalf("batch of another session: %v", err)
	}
	if _, err := s.Extend(req1); err != nil {
		t.Fatalf("refusals moved the session: %v", err)
	}
	if _, err := s.Extend(req1); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("replayed batch: %v", err)
	}
}

func TestKKRTReceiverRefusesBadSetup(t *testing.T) {
	r, setup, err := NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Encode(nil); err == nil {
		t.Fatal("Encode before Finish accepted")
	}
	_, reply, err := NewKKRTSender(nil, setup)
	if err != nil {
		t.Fatal(err)
	}
	bad := *reply
	bad.Session[0] ^= 1
	if err := r.Finish(&bad); !errors.Is(err, ErrSession) {
		t.Fatalf("reply of another session: %v", err)
	}
}

// validKKRTMessages are one encoding of each KKRT message, for the decoder tests and the
// fuzz seeds.
func validKKRTMessages(t testing.TB) map[string][]byte {
	r, setup, err := NewKKRTReceiver(newDetReader(9))
	if err != nil {
		t.Fatal(err)
	}
	_, reply, err := NewKKRTSender(newDetReader(10), setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	req, _, err := r.Encode([]Block{{1}, {2}, {3}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, m := range map[string]interface{ MarshalBinary() ([]byte, error) }{
		"kkrt-setup": setup, "kkrt-setup-reply": reply, "kkrt-request": req,
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

type kkrtCodec interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

// TestKKRTMessagesRejectMalformed: every KKRT message round-trips; every truncation, a
// trailing byte, a wrong type or version, a bad count and a bad base point are ErrMalformed.
func TestKKRTMessagesRejectMalformed(t *testing.T) {
	msgs := validKKRTMessages(t)
	decoders := map[string]func() kkrtCodec{
		"kkrt-setup":       func() kkrtCodec { return new(KKRTSetup) },
		"kkrt-setup-reply": func() kkrtCodec { return new(KKRTSetupReply) },
		"kkrt-request":     func() kkrtCodec { return new(KKRTRequest) },
	}
	for name, b := range msgs {
		t.Run(name, func(t *testing.T) {
			m := decoders[name]()
			if err := m.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			again, err := m.MarshalBinary()
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("does not round-trip: %v", err)
			}
			step := 1
			if len(b) > 2000 {
				step = 61 // the setup reply is 16 KiB; every 61st cut still covers each field
			}
			for cut := 0; cut < len(b); cut += step {
				if err := decoders[name]().UnmarshalBinary(b[:cut]); !errors.Is(err, ErrMalformed) {
					t.Fatalf("truncated to %d bytes: %v", cut, err)
				}
			}
			bad := map[string][]byte{"trailing byte": append(bytes.Clone(b), 0)}
			for i, what := range []string{"type", "version"} {
				c := bytes.Clone(b)
				c[i] ^= 0x40
				bad[what] = c
			}
			for what, c := range bad {
				if err := decoders[name]().UnmarshalBinary(c); !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s: %v", what, err)
				}
			}
		})
	}
	t.Run("identity base point", func(t *testing.T) {
		b := bytes.Clone(msgs["kkrt-setup"])
		// The second base setup's A.
		clear(b[headerSize+setupSize+headerSize : headerSize+2*setupSize])
		if err := new(KKRTSetup).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("identity A: %v", err)
		}
		b = bytes.Clone(msgs["kkrt-setup-reply"])
		b[headerSize+3*setupReplySize-1] ^= 0xff // the last B of the last base reply
		if err := new(KKRTSetupReply).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("non-canonical B: %v", err)
		}
	})
	t.Run("request counts", func(t *testing.T) {
		b := bytes.Clone(msgs["kkrt-request"])
		for _, n := range []uint32{2, 4, MaxKKRTBatch + 1, 1<<32 - 1} {
			c := bytes.Clone(b)
			c[headerSize+8], c[headerSize+9], c[headerSize+10], c[headerSize+11] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
			if err := new(KKRTRequest).UnmarshalBinary(c); !errors.Is(err, ErrMalformed) {
				t.Fatalf("count %d: %v", n, err)
			}
		}
		c := bytes.Clone(b)
		c[headerSize] = 1 // offset 1, not a multiple of 128
		if err := new(KKRTRequest).UnmarshalBinary(c); !errors.Is(err, ErrMalformed) {
			t.Fatalf("unaligned offset: %v", err)
		}
	})
}

func FuzzKKRTSetup(f *testing.F)      { fuzzKKRT[KKRTSetup](f, "kkrt-setup") }
func FuzzKKRTSetupReply(f *testing.F) { fuzzKKRT[KKRTSetupReply](f, "kkrt-setup-reply") }
func FuzzKKRTRequest(f *testing.F)    { fuzzKKRT[KKRTRequest](f, "kkrt-request") }

// fuzzKKRT is fuzzDecoder with the KKRT seeds: decoding never panics, refusals are
// ErrMalformed, and accepted bytes re-encode to themselves.
func fuzzKKRT[T any, PT interface {
	*T
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}](f *testing.F, name string) {
	f.Add(validKKRTMessages(f)[name])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := PT(new(T))
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refusal without ErrMalformed: %v", err)
			}
			return
		}
		out, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

// BenchmarkKKRTOPRF runs whole batches, both sides in one goroutine (request, sender rows,
// receiver outputs, two sender evaluations per instance as the consistency check does).
func BenchmarkKKRTOPRF(b *testing.B) {
	for _, n := range []int{3_456, 82_944} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s, r := kkrtPair(b)
			x := randomBlocks(rand.New(rand.NewPCG(1, 1)), n)
			out := make([]Block, n)
			for b.Loop() {
				req, rb, err := r.Encode(x)
				if err != nil {
					b.Fatal(err)
				}
				sb, err := s.Extend(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = sb.Eval(out, x)
				_ = sb.Eval(out, x)
				if _, err := rb.Outputs(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/instance")
		})
	}
}
