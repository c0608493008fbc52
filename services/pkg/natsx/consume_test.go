package natsx_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestConsumePendingReportsBacklog: ConsumerSpec.Pending is told, after every fetch, how many
// messages the consumer has not been delivered yet — on a real nats-server, 10 messages fetched
// 4 at a time leave 6, then 2, then 0 (the last message's metadata), and the empty fetches
// after them report 0 (the consumer's info).
func TestConsumePendingReportsBacklog(t *testing.T) {
	n := testenv.StartNATS(t)
	js := n.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := js.Publish(ctx, "work.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		seen    []uint64
		handled int
	)
	snapshot := func() ([]uint64, int) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen), handled
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = natsx.Consume(cctx, js, natsx.ConsumerSpec{Stream: "WORK", Durable: "w", Filters: []string{"work.>"}, Batch: 4,
			Pending: func(p uint64) { mu.Lock(); seen = append(seen, p); mu.Unlock() }},
			slog.New(slog.DiscardHandler), func(context.Context, jetstream.Msg) natsx.Outcome {
				mu.Lock()
				handled++
				mu.Unlock()
				return natsx.Ack
			})
	}()
	defer func() { stop(); <-done }()
	testenv.Eventually(t, 20*time.Second, "10 messages handled and an empty fetch reported", func() error {
		s, h := snapshot()
		if h < 10 || len(s) < 4 {
			return fmt.Errorf("%d handled, pending reports %v", h, s)
		}
		return nil
	})
	s, _ := snapshot()
	if want := []uint64{6, 2, 0, 0}; !slices.Equal(s[:4], want) {
		t.Fatalf("pending reports %v, want %v first", s, want)
	}
	for _, p := range s[3:] {
		if p != 0 {
			t.Fatalf("pending reports %v: a drained consumer reported %d", s, p)
		}
	}
}
