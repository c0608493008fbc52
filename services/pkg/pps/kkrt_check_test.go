package pps

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/ot"
)

// kkrtLoopback is a KKRTTransport that runs a KKRTResponder in-process through the wire
// encodings, as the services do over gRPC.
type kkrtLoopback struct {
	labels LabelSource
	tamper func(*KKRTCheckResponse)
	fail   bool // EvaluateKKRT fails before reaching the Garbler
	resp   *KKRTResponder
	setups int
	seen   *KKRTCheckRequest
}

func roundTrip[M interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}](m M, out M) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	return out.UnmarshalBinary(b)
}

func (l *kkrtLoopback) SetupKKRT(_ context.Context, m *ot.KKRTSetup) (*ot.KKRTSetupReply, error) {
	var got ot.KKRTSetup
	if err := roundTrip(m, &got); err != nil {
		return nil, err
	}
	r, reply, err := NewKKRTResponder(nil, &got)
	if err != nil {
		return nil, err
	}
	l.resp, l.setups = r, l.setups+1
	var out ot.KKRTSetupReply
	if err := roundTrip(reply, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (l *kkrtLoopback) EvaluateKKRT(_ context.Context, req *KKRTCheckRequest) (*KKRTCheckResponse, error) {
	if l.fail {
		return nil, errors.New("connection reset")
	}
	var got KKRTCheckRequest
	if err := roundTrip(req, &got); err != nil {
		return nil, err
	}
	l.seen = &got
	resp, err := l.resp.Respond(&got, l.labels)
	if err != nil {
		return nil, err
	}
	var out KKRTCheckResponse
	if err := roundTrip(resp, &out); err != nil {
		return nil, err
	}
	if l.tamper != nil {
		// After decoding, so that the checker's own validation is what a test exercises.
		l.tamper(&out)
	}
	return &out, nil
}

func TestKKRTCheckerFindsExactlyTheInconsistentLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	w := newPSIWorld(8, rng)
	// One checker for all cases: the cases are successive checks of one base-OT session.
	lb := &kkrtLoopback{labels: w.source}
	c := &KKRTChecker{Garbler: lb}
	n := runInconsistencyCases(t, rng, w, func(recv []ReceivedLabel) ([]Position, []Position, error) {
		bad, err := c.Check(context.Background(), ExecID{1}, recv)
		if err != nil {
			return nil, nil, err
		}
		return bad, lb.seen.Positions, nil
	})
	if lb.setups != 1 {
		t.Fatalf("%d base-OT setups for %d checks, want one session", lb.setups, n)
	}
}

// TestKKRTTagsHideWhichLabelMatched: every pair is strictly ascending, so the index of the
// Broker's match follows the two pseudorandom tags, not the bit it holds: over 96 positions
// both indices occur for both bit values. The Broker's side is driven by hand here to see
// its OPRF values.
func TestKKRTTagsHideWhichLabelMatched(t *testing.T) {
	w := newPSIWorld(3, rand.New(rand.NewPCG(33, 34)))
	r, setup, err := ot.NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	g, reply, err := NewKKRTResponder(nil, setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	recv := w.honest() // in position order
	req := &KKRTCheckRequest{Positions: make([]Position, len(recv))}
	inputs := make([]ot.Block, len(recv))
	for i := range recv {
		req.Positions[i], inputs[i] = recv[i].Pos, ot.Block(recv[i].Label)
	}
	oreq, batch, err := r.Encode(inputs)
	if err != nil {
		t.Fatal(err)
	}
	req.OT = *oreq
	resp, err := g.Respond(req, w.source)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := batch.Outputs()
	if err != nil {
		t.Fatal(err)
	}
	var seen [2][2]int // [bit held][index matched]
	for i, pair := range resp.Tags {
		if bytes.Compare(pair[0][:], pair[1][:]) >= 0 {
			t.Fatalf("pair %d not strictly ascending: its order would tell w0 from w1", i)
		}
		pos := req.Positions[i]
		held := uint32(w.values[pos.Slot()]) >> pos.Bit() & 1
		tag := KKRTTag(mine[i][:KKRTTagSize])
		switch tag {
		case pair[0]:
			seen[held][0]++
		case pair[1]:
			seen[held][1]++
		default:
			t.Fatalf("position %d: honest label not matched", pos)
		}
	}
	for b := range 2 {
		for i := range 2 {
			if seen[b][i] == 0 {
				t.Fatalf("bit %d never matched index %d (%v): the order follows the bit", b, i, seen)
			}
		}
	}
}

func TestKKRTCheckerRejectsBadResponses(t *testing.T) {
	w := newPSIWorld(2, rand.New(rand.NewPCG(35, 36)))
	tests := []struct {
		name   string
		tamper func(*KKRTCheckResponse)
	}{
		{"an unsorted pair", func(r *KKRTCheckResponse) { r.Tags[3][0], r.Tags[3][1] = r.Tags[3][1], r.Tags[3][0] }},
		{"another execution", func(r *KKRTCheckResponse) { r.Exec[0] ^= 1 }},
		{"another session", func(r *KKRTCheckResponse) { r.Session[0] ^= 1 }},
		{"another batch", func(r *KKRTCheckResponse) { r.Offset += 128 }},
		{"a pair missing", func(r *KKRTCheckResponse) { r.Tags = r.Tags[1:] }},
		{"a pair too many", func(r *KKRTCheckResponse) { r.Tags = append(r.Tags, r.Tags[0]) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := &kkrtLoopback{labels: w.source, tamper: tt.tamper}
			c := &KKRTChecker{Garbler: lb}
			if _, err := c.Check(context.Background(), ExecID{3}, w.honest()); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check: %v, want ErrMalformed", err)
			}
			// The session is dropped: the next check sets up a new one and succeeds.
			lb.tamper = nil
			if bad, err := c.Check(context.Background(), ExecID{3}, w.honest()); err != nil || bad != nil {
				t.Fatalf("check after a bad response: %v, %v", bad, err)
			}
			if lb.setups != 2 {
				t.Fatalf("%d setups, want a new session after the bad response", lb.setups)
			}
		})
	}
}

func TestKKRTCheckerRecoversFromTransportError(t *testing.T) {
	w := newPSIWorld(2, rand.New(rand.NewPCG(37, 38)))
	lb := &kkrtLoopback{labels: w.source}
	c := &KKRTChecker{Garbler: lb}
	if err := c.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	lb.fail = true
	if _, err := c.Check(context.Background(), ExecID{4}, w.honest()); err == nil {
		t.Fatal("transport error not reported")
	}
	lb.fail = false
	if bad, err := c.Check(context.Background(), ExecID{4}, w.honest()); err != nil || bad != nil {
		t.Fatalf("check after a transport error: %v, %v", bad, err)
	}
}

func TestKKRTCheckerRejectsDuplicatePositions(t *testing.T) {
	w := newPSIWorld(1, rand.New(rand.NewPCG(1, 1)))
	recv := w.honest()
	recv = append(recv, recv[0])
	lb := &kkrtLoopback{labels: w.source}
	if _, err := (&KKRTChecker{Garbler: lb}).Check(context.Background(), ExecID{}, recv); err == nil {
		t.Fatal("a position received twice was accepted")
	}
	if lb.setups != 0 {
		t.Fatal("a refused check reached the Garbler")
	}
}

func TestKKRTCheckerEmpty(t *testing.T) {
	lb := &kkrtLoopback{}
	if bad, err := (&KKRTChecker{Garbler: lb}).Check(context.Background(), ExecID{}, nil); err != nil || bad != nil {
		t.Fatalf("empty check: %v, %v", bad, err)
	}
}

func TestKKRTResponderRejectsBadRequests(t *testing.T) {
	w := newPSIWorld(1, rand.New(rand.NewPCG(39, 40)))
	r, setup, err := ot.NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, reply, err := NewKKRTResponder(nil, setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	oreq, _, err := r.Encode(make([]ot.Block, 2))
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]*KKRTCheckRequest{
		"repeated positions":   {Positions: []Position{5, 5}, OT: *oreq},
		"descending positions": {Positions: []Position{6, 5}, OT: *oreq},
		"rows missing":         {Positions: []Position{5}, OT: *oreq},
	} {
		if _, err := resp.Respond(req, w.source); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	ahead := *oreq
	ahead.Offset += 128
	if _, err := resp.Respond(&KKRTCheckRequest{Positions: []Position{1, 2}, OT: ahead}, w.source); !errors.Is(err, ot.ErrOutOfOrder) {
		t.Errorf("batch out of order: %v", err)
	}
	if _, err := resp.Respond(&KKRTCheckRequest{Positions: []Position{1, 2}, OT: *oreq}, w.source); err != nil {
		t.Errorf("the refusals moved the session: %v", err)
	}
}

func TestSortTagPair(t *testing.T) {
	for _, p := range [][2]KKRTTag{{{1}, {2}}, {{2}, {1}}, {{0, 0xff}, {1}}, {{1}, {0, 0xff}}, {{7}, {7}}} {
		q := p
		sortTagPair(&q)
		if !tagPairSorted(&q) || !(q == p || q == [2]KKRTTag{p[1], p[0]}) {
			t.Fatalf("sortTagPair(%v) = %v", p, q)
		}
	}
}

func TestKKRTMessagesRoundTrip(t *testing.T) {
	r, setup, err := ot.NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, reply, err := ot.NewKKRTSender(nil, setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(reply); err != nil {
		t.Fatal(err)
	}
	oreq, _, err := r.Encode(make([]ot.Block, 3))
	if err != nil {
		t.Fatal(err)
	}
	exec := ExecID{0xbe, 15: 0xef}
	req := &KKRTCheckRequest{Exec: exec, Positions: []Position{0, 5, 1 << 20}, OT: *oreq}
	resp := &KKRTCheckResponse{Exec: exec, Session: oreq.Session, Offset: 256, Tags: [][2]KKRTTag{{{1}, {2}}, {{3}, {3}}}}
	for _, m := range []kkrtMessage{req, resp} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.UnmarshalBinary(b); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		b2, _ := m.MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Fatalf("%T does not round-trip", m)
		}
		for cut := range len(b) {
			if err := m.UnmarshalBinary(b[:cut]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T truncated to %d bytes: %v, want ErrMalformed", m, cut, err)
			}
		}
		if err := m.UnmarshalBinary(append(bytes.Clone(b), 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%T with a trailing byte: %v", m, err)
		}
		c := bytes.Clone(b)
		c[0] = msgPSIRequest
		if err := m.UnmarshalBinary(c); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%T with another type: %v", m, err)
		}
	}
	for name, m := range map[string]kkrtMessage{
		"repeated positions": &KKRTCheckRequest{Positions: []Position{5, 5}, OT: ot.KKRTRequest{Rows: make([]ot.Wide, 2)}},
		"fewer rows":         &KKRTCheckRequest{Positions: []Position{5, 6}, OT: ot.KKRTRequest{Rows: make([]ot.Wide, 1)}},
		"unsorted pair":      &KKRTCheckResponse{Tags: [][2]KKRTTag{{{2}, {1}}}},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			continue // refused already at encoding
		}
		if err := m.UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

type kkrtMessage interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}

func FuzzKKRTCheckRequest(f *testing.F) {
	fuzzDecoder(f, func() *KKRTCheckRequest { return new(KKRTCheckRequest) },
		&KKRTCheckRequest{Positions: []Position{1, 2}, OT: ot.KKRTRequest{Rows: make([]ot.Wide, 2)}})
}

func FuzzKKRTCheckResponse(f *testing.F) {
	fuzzDecoder(f, func() *KKRTCheckResponse { return new(KKRTCheckResponse) },
		&KKRTCheckResponse{Offset: 128, Tags: [][2]KKRTTag{{{1}, {2}}}})
}
