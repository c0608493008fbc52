package roles

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestForwarderBatchesAndMarks: on a real nats-server, the M2s a gateway admits in one round
// reach V*'s stream as one message — the M2s back to back, in admission order — and are
// marked forwarded in the store; M2s whose publish fails (no stream takes V*'s subject) stay
// unmarked, so that the coordinator re-forwards them at close; Close publishes what is left.
func TestForwarderBatchesAndMarks(t *testing.T) {
	js := testenv.StartNATS(t).JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "V0", Subjects: []string{contract.VendorInbox(0) + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	store := roundstate.NewMemory(8)
	f := newForwarder(js, store, nil, nil)
	life, stop := context.WithCancel(ctx)
	go f.run(life)

	p := testParams(t)
	outer := func(t uint64, i uint32) []byte { // fixed size, distinct per command
		b := make([]byte, p.OuterSize())
		copy(b, fmt.Appendf(nil, "outer-%03d-%03d", t, i))
		return b
	}
	m2 := func(round uint64, i uint32) []byte {
		b, err := mohito.MarshalForward(p, round, i, outer(round, i))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	admit := func(round uint64, shuffler, n int) {
		for j := range n {
			idx, err := store.Admit(ctx, round, fmt.Sprintf("u%d", j), 1, outer(round, uint32(j)))
			if err != nil {
				t.Fatal(err)
			}
			f.add(p, round, shuffler, idx, outer(round, idx))
		}
	}
	forwarded := func(round uint64) (n int) {
		adm, err := store.Admitted(ctx, round)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range adm {
			if a.Forwarded {
				n++
			}
		}
		return n
	}

	admit(7, 0, 20)
	testenv.Eventually(t, 10*time.Second, "round 7's M2s marked forwarded", func() error {
		if n := forwarded(7); n != 20 {
			return fmt.Errorf("%d of 20", n)
		}
		return nil
	})
	msg, err := s.GetLastMsgForSubject(ctx, contract.ToVendor(0, 7, contract.KindForward))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range uint32(20) {
		want = append(want, m2(7, i)...)
	}
	if info, _ := s.Info(ctx); info.State.Msgs != 1 || !bytes.Equal(msg.Data, want) {
		t.Fatalf("%d messages in V*'s stream, last %q; want one batch of the 20 M2s in order", info.State.Msgs, msg.Data)
	}

	// Vendor 1's inbox has no stream here: every publish fails, nothing is marked.
	admit(8, 1, 5)
	time.Sleep(fwdLinger + 3*time.Second) // past the publish's own deadline (2 s)
	if n := forwarded(8); n != 0 {
		t.Fatalf("%d M2s marked forwarded although their publish failed", n)
	}

	// Close publishes the batch still lingering.
	admit(9, 0, 3)
	stop()
	<-f.done
	if n := forwarded(9); n != 3 {
		t.Fatalf("after Close, %d of round 9's 3 M2s forwarded", n)
	}
}
