package roles

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestGarblerPregarbledOnce: an execution garbled ahead (Pregarble) is garbled with its
// inputs by the one Garble that names it — the inputs stream only, under the same execution
// id — and by no other: a second Garble naming it, a Garble naming an id the garbler never
// pregarbled, or one naming it for another function fails with FAILED_PRECONDITION, and two
// Pregarbles never share an execution id.
func TestGarblerPregarbledOnce(t *testing.T) {
	e := newGarblerEnv(t)
	f := e.register(t, `(begin (define xs (window "a" 8)) (list (sum xs) (mean xs)))`)
	other := e.register(t, `(begin (define xs (window "a" 8)) (list (max xs)))`)
	p := e.setupPublisher(t, f.ID, other.ID)
	plan, err := gc.Compile(f.Circuit)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pregarble := func() []byte {
		t.Helper()
		h := f.Circuit.Hash()
		st, err := e.client.Pregarble(ctx, &ppsv1.PregarbleRequest{FnId: f.ID, CircuitHash: h[:]})
		if err != nil {
			t.Fatal(err)
		}
		first, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var tabs bytes.Buffer
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			tabs.Write(m.GetData())
		}
		if n := gc.TablesSize(plan, 0); int64(tabs.Len()) != n || first.GetHeader().GetStreamBytes() != uint64(n) {
			t.Fatalf("tables stream of %d bytes announced %d, want %d", tabs.Len(), first.GetHeader().GetStreamBytes(), n)
		}
		tb, err := gc.ReadTables(plan, &tabs)
		if err != nil {
			t.Fatal(err)
		}
		if id := tb.ExecID(); !bytes.Equal(id[:], first.GetHeader().GetExecId()) {
			t.Fatal("tables stream's execution id differs from its header's")
		}
		return first.GetHeader().GetExecId()
	}
	garble := func(fn string, hash [32]byte, id []byte) (*ppsv1.GarbleHeader, uint64, error) {
		t.Helper()
		req := &ppsv1.GarbleRequest{FnId: fn, CircuitHash: hash[:], PregarbledExecId: id}
		for i := range f.Layout.Slots {
			req.Slots = append(req.Slots, &ppsv1.SlotInput{Slot: uint32(i), PubId: p.dev.id, Round: uint64(8 - i)})
		}
		st, err := e.client.Garble(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		first, err := st.Recv()
		if err != nil {
			return nil, 0, err
		}
		var n uint64
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return first.GetHeader(), n, nil
			}
			if err != nil {
				return nil, 0, err
			}
			n += uint64(len(m.GetData()))
		}
	}
	id1, id2 := pregarble(), pregarble()
	if bytes.Equal(id1, id2) {
		t.Fatal("two pregarbled executions share an execution id")
	}
	h, n, err := garble(f.ID, f.Circuit.Hash(), id1)
	if err != nil {
		t.Fatal(err)
	}
	// The inputs stream: 32 B per identity gate, 16 B per constant (the validity bits).
	cl := len(garbleContext(f.ID, h.GetRound(), h.GetEpoch()))
	lo, hi := gc.InputsSize(plan, plan.NumInputWires(), cl), gc.InputsSize(plan, 0, cl)
	if !bytes.Equal(h.GetExecId(), id1) || n < uint64(lo) || n > uint64(hi) || h.GetStreamBytes() != n {
		t.Fatalf("garbled %d bytes (header %d) of execution %x, want the %d–%d-byte inputs stream of %x", n, h.GetStreamBytes(), h.GetExecId(), lo, hi, id1)
	}
	unknown := make([]byte, 16)
	rand.Read(unknown)
	for name, c := range map[string]struct {
		fn   string
		hash [32]byte
		id   []byte
	}{
		"used":             {f.ID, f.Circuit.Hash(), id1},
		"unknown":          {f.ID, f.Circuit.Hash(), unknown},
		"another function": {other.ID, other.Circuit.Hash(), id2},
	} {
		if _, _, err := garble(c.fn, c.hash, c.id); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: Garble naming a pregarbled execution: %v, want FAILED_PRECONDITION", name, err)
		}
	}
	// id2 was dropped with the refusal above: it is not garbled either.
	if _, _, err := garble(f.ID, f.Circuit.Hash(), id2); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Garble of a pregarbled execution named for another function first: %v, want FAILED_PRECONDITION", err)
	}
	// A full Garble still works.
	if h, _, err := garble(f.ID, f.Circuit.Hash(), nil); err != nil || bytes.Equal(h.GetExecId(), id1) || bytes.Equal(h.GetExecId(), id2) {
		t.Fatalf("full Garble after the pregarbled ones: %v", err)
	}
}

// dropAll erases every pregarbled execution, as a garbler restart would.
func (s *pregarbledSet) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.byID {
		p.pg.Erase()
		delete(s.byID, id)
	}
	s.order = nil
}

// TestBrokerPregarbledExecutions: with Pregarble the broker fetches each execution's AND
// tables during its window (after registration, then on the window's first publish) and the
// tick's Garble streams the inputs stream only — the outputs equal the model, the record
// counts the tables in AheadBytes; when the garbler no longer holds the execution (a
// restart), the broker garbles that execution in full and the output is still the model's.
func TestBrokerPregarbledExecutions(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, body: btStats, pregarble: true})
	for round := range uint64(3) {
		xs := btValues(9)
		for i := range xs {
			xs[i] = xs[i].Add(pps.FixedFromInt(int(round)))
		}
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
		testenv.Eventually(t, 2*time.Minute, "the next execution garbled ahead", func() error {
			if !w.b.PregarbleReady() {
				return errors.New("no tables held")
			}
			return nil
		})
		restarted := round == 2
		if restarted {
			w.g.garbler.pre.dropAll()
		}
		o := w.runTick(t, float64(9*(round+1)))
		w.check(t, o, xs, nil)
		e := w.lastExecution(t, int(round)+1)
		if e.Status != contract.StatusOK {
			t.Fatalf("day %d: execution %+v", round, e)
		}
		switch {
		case !restarted && (e.AheadBytes == 0 || e.Bytes <= e.AheadBytes):
			t.Errorf("day %d: %d bytes ahead of %d, want the AND tables garbled ahead", round, e.AheadBytes, e.Bytes)
		case restarted && e.AheadBytes != 0:
			t.Errorf("day %d: %d bytes ahead after the garbler forgot the execution, want a full Garble", round, e.AheadBytes)
		}
	}
	if !strings.Contains(w.b.log.String(), "garbling in full") {
		t.Error("the broker did not log its fallback to a full Garble")
	}
}
