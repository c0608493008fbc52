package pps

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// loopback is a PSITransport that runs RespondPSI in-process through the wire encoding, as
// the services do over gRPC.
type loopback struct {
	labels LabelSource
	tamper func(*PSIResponse)
	seen   *PSIRequest
}

func (l *loopback) EvaluatePSI(_ context.Context, req *PSIRequest) (*PSIResponse, error) {
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	var got PSIRequest
	if err := got.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	l.seen = &got
	resp, err := RespondPSI(&got, l.labels)
	if err != nil {
		return nil, err
	}
	if l.tamper != nil {
		l.tamper(resp)
	}
	if b, err = resp.MarshalBinary(); err != nil {
		return nil, err
	}
	var out PSIResponse
	// A tampered (unsorted) response is decoded leniently here so the checker's own
	// validation is what the test exercises.
	if err := out.UnmarshalBinary(b); err != nil {
		return resp, nil
	}
	return &out, nil
}

// psiWorld is a set of publishers, one value per slot, and what the Garbler can derive.
type psiWorld struct {
	seeds  []Seed  // round seed of each slot's publisher
	values []Fixed // the value of each slot
	erased map[int]bool
}

func newPSIWorld(slots int, rng *rand.Rand) *psiWorld {
	w := &psiWorld{seeds: make([]Seed, slots), values: make([]Fixed, slots), erased: map[int]bool{}}
	for i := range w.seeds {
		for j := range w.seeds[i] {
			w.seeds[i][j] = byte(rng.Uint32())
		}
		w.values[i] = Fixed(rng.Uint32())
	}
	return w
}

func (w *psiWorld) source(p Position) (LabelPair, error) {
	if p.Slot() >= len(w.seeds) {
		return LabelPair{}, fmt.Errorf("slot %d unknown", p.Slot())
	}
	if w.erased[p.Slot()] {
		return LabelPair{}, ErrRoundErased
	}
	return ValueLabels(&w.seeds[p.Slot()], 0)[p.Bit()], nil
}

// honest is what the Broker receives from honest publishers.
func (w *psiWorld) honest() []ReceivedLabel {
	var out []ReceivedLabel
	for s := range w.seeds {
		pairs := ValueLabels(&w.seeds[s], 0)
		for j := range ValueBits {
			out = append(out, ReceivedLabel{PositionOf(s, j), pairs[j][uint32(w.values[s])>>j&1]})
		}
	}
	return out
}

// inconsistencyCase is one way a Broker's received labels can be wrong (spec §10 #3), and
// the positions a consistency check must report for it.
type inconsistencyCase struct {
	name    string
	tamper  func(recv []ReceivedLabel)
	erase   []int
	wantBad []Position
}

// inconsistencyCases are the cases every ConsistencyChecker is tested on, over a world of at
// least 8 slots.
func inconsistencyCases(w *psiWorld) []inconsistencyCase {
	otherRound := PRF(&w.seeds[3], "another round")
	return []inconsistencyCase{
		{name: "all honest"},
		{
			name:    "a random label",
			tamper:  func(r []ReceivedLabel) { r[PositionOf(1, 5)].Label = Label{1, 2, 3} },
			wantBad: []Position{PositionOf(1, 5)},
		},
		{
			name: "a valid label of another bit position",
			tamper: func(r []ReceivedLabel) {
				r[PositionOf(2, 7)].Label = ValueLabels(&w.seeds[2], 0)[8][0]
			},
			wantBad: []Position{PositionOf(2, 7)},
		},
		{
			name: "the other bit's label of another position",
			tamper: func(r []ReceivedLabel) {
				r[PositionOf(2, 9)].Label = ValueLabels(&w.seeds[2], 0)[10][1]
			},
			wantBad: []Position{PositionOf(2, 9)},
		},
		{
			name: "a label from another round",
			tamper: func(r []ReceivedLabel) {
				for j := range ValueBits {
					r[PositionOf(3, j)].Label = ValueLabels(&otherRound, 0)[j][0]
				}
			},
			wantBad: positionsOf(3),
		},
		{
			name: "labels from another publisher",
			tamper: func(r []ReceivedLabel) {
				for j := range ValueBits {
					r[PositionOf(4, j)].Label = ValueLabels(&w.seeds[5], 0)[j][1]
				}
			},
			wantBad: positionsOf(4),
		},
		{
			name: "the other valid label is consistent",
			tamper: func(r []ReceivedLabel) {
				// A publisher may send either label: that changes its input, not its consistency.
				p := ValueLabels(&w.seeds[6], 0)[0]
				r[PositionOf(6, 0)].Label = p[1-uint32(w.values[6])&1]
			},
		},
		{name: "an erased round at the Garbler", erase: []int{7}, wantBad: positionsOf(7)},
	}
}

// runInconsistencyCases runs every inconsistency case through check (which returns the bad
// positions and the positions its request named) in shuffled order, and asserts exactly the
// case's positions are reported and the request named the sorted received set.
func runInconsistencyCases(t *testing.T, rng *rand.Rand, w *psiWorld, check func(recv []ReceivedLabel) (bad, requested []Position, err error)) int {
	cases := inconsistencyCases(w)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			recv := w.honest()
			if tt.tamper != nil {
				tt.tamper(recv)
			}
			w.erased = map[int]bool{}
			for _, s := range tt.erase {
				w.erased[s] = true
			}
			rng.Shuffle(len(recv), func(i, j int) { recv[i], recv[j] = recv[j], recv[i] })
			bad, requested, err := check(recv)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(bad, tt.wantBad) {
				t.Fatalf("bad positions %v, want %v", bad, tt.wantBad)
			}
			if !slices.IsSorted(requested) || len(requested) != len(recv) {
				t.Fatalf("request positions not the sorted received set")
			}
		})
	}
	return len(cases)
}

func TestOPRFCheckerFindsExactlyTheInconsistentLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	w := newPSIWorld(8, rng)
	runInconsistencyCases(t, rng, w, func(recv []ReceivedLabel) ([]Position, []Position, error) {
		lb := &loopback{labels: w.source}
		c := &OPRFChecker{Garbler: lb}
		bad, err := c.Check(context.Background(), ExecID{1}, recv)
		if err != nil {
			return nil, nil, err
		}
		return bad, lb.seen.Positions, nil
	})
}

func positionsOf(slot int) []Position {
	var ps []Position
	for j := range ValueBits {
		ps = append(ps, PositionOf(slot, j))
	}
	return ps
}

func TestRespondPSITagsHideWhichLabelMatched(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	w := newPSIWorld(3, rng)
	lb := &loopback{labels: w.source}
	var resp *PSIResponse
	lb.tamper = func(r *PSIResponse) { resp = r }
	if _, err := (&OPRFChecker{Garbler: lb}).Check(context.Background(), ExecID{2}, w.honest()); err != nil {
		t.Fatal(err)
	}
	if len(resp.Tags) != 2*3*ValueBits {
		t.Fatalf("%d tags, want both labels of %d positions", len(resp.Tags), 3*ValueBits)
	}
	for i := 1; i < len(resp.Tags); i++ {
		if string(resp.Tags[i][:]) <= string(resp.Tags[i-1][:]) {
			t.Fatalf("tags not strictly sorted at %d: their order would tell w0 from w1", i)
		}
	}
}

func TestOPRFCheckerRejectsBadResponses(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	w := newPSIWorld(2, rng)
	tests := []struct {
		name   string
		tamper func(*PSIResponse)
	}{
		{"unsorted tags", func(r *PSIResponse) { slices.Reverse(r.Tags) }},
		{"another execution", func(r *PSIResponse) { r.Exec[0] ^= 1 }},
		{"an element missing", func(r *PSIResponse) { r.Evaluated = r.Evaluated[1:] }},
		{"a non-canonical element", func(r *PSIResponse) { r.Evaluated[3] = [32]byte{0xff, 0xff} }},
		{"the identity element", func(r *PSIResponse) { r.Evaluated[0] = [32]byte{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &OPRFChecker{Garbler: &loopback{labels: w.source, tamper: tt.tamper}}
			if _, err := c.Check(context.Background(), ExecID{3}, w.honest()); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Check: %v, want ErrMalformed", err)
			}
		})
	}
}

func TestOPRFCheckerRejectsDuplicatePositions(t *testing.T) {
	w := newPSIWorld(1, rand.New(rand.NewPCG(1, 1)))
	recv := w.honest()
	recv = append(recv, recv[0])
	if _, err := (&OPRFChecker{Garbler: &loopback{labels: w.source}}).Check(context.Background(), ExecID{}, recv); err == nil {
		t.Fatal("a position received twice was accepted")
	}
}

func TestRespondPSIRejectsBadElements(t *testing.T) {
	req := &PSIRequest{Positions: []Position{0}, Blinded: [][32]byte{{}}}
	if _, err := RespondPSI(req, func(Position) (LabelPair, error) { return LabelPair{}, nil }); err == nil {
		t.Fatal("identity element accepted")
	}
}

func TestBadSlots(t *testing.T) {
	got := BadSlots([]Position{PositionOf(5, 1), PositionOf(2, 0), PositionOf(5, 31), PositionOf(0, 3)})
	if !slices.Equal(got, []uint32{0, 2, 5}) {
		t.Fatalf("BadSlots = %v", got)
	}
}

func TestPSIMessagesRoundTrip(t *testing.T) {
	exec := ExecID{0xde, 0xad, 15: 0xef}
	req := &PSIRequest{Exec: exec, S2: *testSeed(3), Positions: []Position{0, 5, 1 << 20}, Blinded: make([][32]byte, 3)}
	req.Blinded[2][7] = 9
	resp := &PSIResponse{Exec: exec, Evaluated: make([][32]byte, 2), Tags: [][TagSize]byte{{1}, {2}, {2, 1}}}
	inc := &InconsistentSlots{Exec: exec, Slots: []uint32{1, 7, 9}}
	for _, m := range []interface {
		MarshalBinary() ([]byte, error)
		UnmarshalBinary([]byte) error
	}{req, resp, inc} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.UnmarshalBinary(b); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		b2, _ := m.MarshalBinary()
		if string(b) != string(b2) {
			t.Fatalf("%T does not round-trip", m)
		}
		for cut := range len(b) {
			if err := m.UnmarshalBinary(b[:cut]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T truncated to %d bytes: %v, want ErrMalformed", m, cut, err)
			}
		}
		if err := m.UnmarshalBinary(append(b, 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%T with a trailing byte: %v", m, err)
		}
	}
}

func TestPSIDecodersRejectUnordered(t *testing.T) {
	req := &PSIRequest{Positions: []Position{5, 5}, Blinded: make([][32]byte, 2)}
	b, _ := req.MarshalBinary()
	if err := new(PSIRequest).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("repeated positions: %v", err)
	}
	resp := &PSIResponse{Tags: [][TagSize]byte{{2}, {1}}}
	b, _ = resp.MarshalBinary()
	if err := new(PSIResponse).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("unsorted tags: %v", err)
	}
	inc := &InconsistentSlots{Slots: []uint32{3, 1}}
	b, _ = inc.MarshalBinary()
	if err := new(InconsistentSlots).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("unsorted slots: %v", err)
	}
	b, _ = (&InconsistentSlots{}).MarshalBinary()
	b[0] = msgPSIRequest
	if err := new(InconsistentSlots).UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("wrong message type: %v", err)
	}
}

// fuzzDecoder checks that a decoder never panics and that whatever it accepts re-encodes
// to the same bytes (one encoding per message).
func fuzzDecoder[M interface {
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}](f *testing.F, newM func() M, seeds ...M) {
	for _, s := range seeds {
		b, _ := s.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := newM()
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error without ErrMalformed: %v", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil || string(again) != string(b) {
			t.Fatalf("accepted bytes do not re-encode to themselves: %v", err)
		}
	})
}

func FuzzPSIRequest(f *testing.F) {
	fuzzDecoder(f, func() *PSIRequest { return new(PSIRequest) },
		&PSIRequest{Positions: []Position{1, 2}, Blinded: make([][32]byte, 2)})
}

func FuzzPSIResponse(f *testing.F) {
	fuzzDecoder(f, func() *PSIResponse { return new(PSIResponse) },
		&PSIResponse{Evaluated: make([][32]byte, 1), Tags: [][TagSize]byte{{1}, {2}}})
}

func FuzzInconsistent(f *testing.F) {
	fuzzDecoder(f, func() *InconsistentSlots { return new(InconsistentSlots) }, &InconsistentSlots{Slots: []uint32{0, 4}})
}
