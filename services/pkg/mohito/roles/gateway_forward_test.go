package roles

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// fwdFixture is a real nats-server with a stream for vendor 0's inbox (V* of every round
// here; vendor 1 has none), a memory store, and the rounds' admissions.
type fwdFixture struct {
	t      *testing.T
	ctx    context.Context
	js     jetstream.JetStream
	stream jetstream.Stream
	store  *roundstate.Memory
	p      mohito.Params
}

func newFwdFixture(t *testing.T) *fwdFixture {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "V0", Subjects: []string{contract.VendorInbox(0) + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	return &fwdFixture{t: t, ctx: ctx, js: js, stream: s, store: roundstate.NewMemory(8), p: testParams(t)}
}

// start runs a forwarder (a gateway replica's) until stop; done is closed once it has
// published what was left.
func (x *fwdFixture) start() (f *forwarder, stop func()) {
	f = newForwarder(x.js, x.store, nil, nil)
	life, cancel := context.WithCancel(x.ctx)
	go f.run(life)
	x.t.Cleanup(func() { cancel(); <-f.done })
	return f, cancel
}

// outer is a fixed-size outer layer, distinct per command.
func (x *fwdFixture) outer(round uint64, i uint32) []byte {
	b := make([]byte, x.p.OuterSize())
	copy(b, fmt.Appendf(nil, "outer-%03d-%03d", round, i))
	return b
}

// admit admits command j of round t in the store, as Submit does, and hands it to f.
func (x *fwdFixture) admit(f *forwarder, round uint64, shuffler, j int) {
	idx, err := x.store.Admit(x.ctx, round, fmt.Sprintf("u%d", j), 1, x.outer(round, uint32(j)))
	if err != nil {
		x.t.Fatal(err)
	}
	f.add(x.p, round, shuffler, idx, x.outer(round, idx))
}

func (x *fwdFixture) forwarded(round uint64) (n int) {
	adm, err := x.store.Admitted(x.ctx, round)
	if err != nil {
		x.t.Fatal(err)
	}
	for _, a := range adm {
		if a.Forwarded {
			n++
		}
	}
	return n
}

func (x *fwdFixture) waitForwarded(round uint64, n int) {
	x.t.Helper()
	testenv.Eventually(x.t, 20*time.Second, fmt.Sprintf("round %d: %d M2s marked forwarded", round, n), func() error {
		if got := x.forwarded(round); got != n {
			return fmt.Errorf("%d of %d", got, n)
		}
		return nil
	})
}

// received is what V*'s stream holds of round t's forwards, in order: each message's size,
// and the M2s they carry, back to back.
func (x *fwdFixture) received(round uint64) (sizes []int, m2s [][]byte) {
	x.t.Helper()
	info, err := x.stream.Info(x.ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	subject, size := contract.ToVendor(0, round, contract.KindForward), x.p.ForwardSize()
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := x.stream.GetMsg(x.ctx, seq)
		if err != nil {
			x.t.Fatal(err)
		}
		if m.Subject != subject {
			continue
		}
		sizes = append(sizes, len(m.Data))
		for off := 0; off+size <= len(m.Data); off += size {
			m2s = append(m2s, m.Data[off:off+size])
		}
	}
	return sizes, m2s
}

// TestForwarderPublishesEachM2AndMarks: on a real nats-server, the M2s a gateway admits in
// one round reach V*'s stream one message each, in admission order, and are marked forwarded
// in the store; M2s whose publish fails (no stream takes V*'s subject) stay unmarked, so that
// the coordinator re-forwards them at close; Close publishes what is left.
func TestForwarderPublishesEachM2AndMarks(t *testing.T) {
	x := newFwdFixture(t)
	f, stop := x.start()

	for j := range 20 {
		x.admit(f, 7, 0, j)
	}
	x.waitForwarded(7, 20)
	sizes, m2s := x.received(7)
	if len(sizes) != 20 {
		t.Fatalf("V*'s stream holds %d messages of round 7 (sizes %v); want one per M2, 20", len(sizes), sizes)
	}
	for i, got := range m2s {
		want, err := mohito.MarshalForward(x.p, 7, uint32(i), x.outer(7, uint32(i)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d is not M2 %d (admission order)", i, i)
		}
	}

	// Vendor 1's inbox has no stream here: every publish fails, nothing is marked.
	for j := range 5 {
		x.admit(f, 8, 1, j)
	}
	testenv.Eventually(t, 20*time.Second, "round 8's publishes given up", func() error {
		if n := f.failed.Load(); n != 5 {
			return fmt.Errorf("%d of 5", n)
		}
		return nil
	})
	if n := x.forwarded(8); n != 0 {
		t.Fatalf("%d M2s marked forwarded although their publish failed", n)
	}

	// Close publishes what is still queued.
	for j := range 3 {
		x.admit(f, 9, 0, j)
	}
	stop()
	<-f.done
	if n := x.forwarded(9); n != 3 {
		t.Fatalf("after Close, %d of round 9's 3 M2s forwarded", n)
	}
}

// TestForwarderWireShapeIndependentOfTiming: what V* receives of a round's forwards — how many
// messages, their sizes and order — is a function of k and the public parameters only, however
// the round's submissions reached the gateways: in one burst, one at a time (each forwarded
// before the next arrives, as on a loaded machine), or in bursts alternating between two
// replicas. Each arrival gives k messages of Params.ForwardSize(), every index once, all
// marked forwarded. The forwarder that batched by time (20 ms after the first M2) sent the
// burst as one message of k M2s and the trickle as k messages, so a vendor's transcript told
// how the round's traffic was timed (TestVendorWireTranscriptIndependentOfRecipients failed
// under load with 2 × 2 M2s in one run and 2 + 1 + 1 in the other).
func TestForwarderWireShapeIndependentOfTiming(t *testing.T) {
	x := newFwdFixture(t)
	fa, _ := x.start()
	fb, _ := x.start()
	const k = 12
	arrivals := []struct {
		name   string
		arrive func(round uint64)
	}{
		{"one burst", func(round uint64) {
			for j := range k {
				x.admit(fa, round, 0, j)
			}
		}},
		{"one at a time", func(round uint64) {
			for j := range k {
				x.admit(fa, round, 0, j)
				x.waitForwarded(round, j+1)
			}
		}},
		{"bursts of 3 alternating between two replicas", func(round uint64) {
			for j := 0; j < k; j += 3 {
				f := []*forwarder{fa, fb}[j/3%2]
				for i := j; i < j+3; i++ {
					x.admit(f, round, 0, i)
				}
				x.waitForwarded(round, j+3)
			}
		}},
	}
	want := slices.Repeat([]int{x.p.ForwardSize()}, k)
	for i, a := range arrivals {
		round := uint64(i + 1)
		a.arrive(round)
		x.waitForwarded(round, k)
		sizes, m2s := x.received(round)
		if !slices.Equal(sizes, want) {
			t.Errorf("%s: V* received messages of %v bytes; want %d of %d (one M2 each), whatever the timing", a.name, sizes, k, x.p.ForwardSize())
		}
		var idx []uint32
		for _, m2 := range m2s {
			i, _, err := mohito.ParseForward(x.p, round, m2)
			if err != nil {
				t.Fatal(err)
			}
			idx = append(idx, i)
		}
		slices.Sort(idx)
		if len(idx) != k || idx[0] != 0 || idx[k-1] != k-1 || len(slices.Compact(idx)) != k {
			t.Errorf("%s: V* received indices %v; want 0…%d once each", a.name, idx, k-1)
		}
	}
}
