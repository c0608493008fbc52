package roles

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/testenv"
)

// BenchmarkForwardToShuffler: the CPU per M2 of taking a round's admitted M2s from a gateway
// into V*'s stream (memory storage, as V_IN) and out to a consumer that acks every message,
// as the shuffler does — the gateway, the in-process nats-server and the consumer, so the
// process's CPU (getrusage) is the cost. "one-message-per-M2" is the forwarder (the wire shape
// V* may see: k × ForwardSize); "batches-of-64" publishes the same M2s 64 to a message, one
// synchronous publish and one mark per batch, as the forwarder that batched by time did at a
// few thousand commands/s — cheaper per M2, but its shape told a vendor how the round's
// traffic was timed. Compare the two in the same run.
func BenchmarkForwardToShuffler(b *testing.B) {
	const fwdBenchAhead = 1024
	p := testParams(b)
	size := p.ForwardSize()
	outer := make([]byte, p.OuterSize())
	for _, mode := range []string{"one-message-per-M2", "batches-of-64"} {
		b.Run(mode, func(b *testing.B) {
			js := testenv.StartNATS(b).JetStream(b)
			ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "V0", Subjects: []string{contract.VendorInbox(0) + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
				b.Fatal(err)
			}
			cons, err := js.CreateOrUpdateConsumer(ctx, "V0", jetstream.ConsumerConfig{Durable: "shuffler", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			store := roundstate.NewMemory(8)
			var f *forwarder
			if mode == "one-message-per-M2" {
				f = newForwarder(js, store, nil, nil)
				life, stop := context.WithCancel(ctx)
				go f.run(life)
				defer func() { stop(); <-f.done }()
			}
			var got atomic.Int64
			progress := make(chan struct{}, 1)
			received := make(chan struct{})
			cc, err := cons.Consume(func(m jetstream.Msg) { // V*: counts the M2s it receives, acks each message
				n := got.Add(int64(len(m.Data()) / size))
				_ = m.Ack()
				select {
				case progress <- struct{}{}:
				default:
				}
				if n == int64(b.N) {
					close(received)
				}
			}, jetstream.PullMaxMessages(128))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Stop()
			var batch []byte
			var idx []uint32
			flush := func(t uint64) {
				if len(idx) == 0 {
					return
				}
				if err := natsx.Publish(ctx, js, contract.ToVendor(0, t, contract.KindForward), fmt.Sprintf("fwdb-%d-%d-%d", t, idx[0], len(idx)), batch, nil); err != nil {
					b.Fatal(err)
				}
				if err := store.MarkForwarded(ctx, t, idx...); err != nil {
					b.Fatal(err)
				}
				batch, idx = batch[:0], idx[:0]
			}
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for i := range b.N {
				// Submissions arrive at the pace V* takes them in (at most fwdBenchAhead
				// ahead), not all at once: a pass then holds what arrived meanwhile.
				for int64(i)-got.Load() > fwdBenchAhead {
					<-progress
				}
				t, j := uint64(1+i/10000), uint32(i%10000) // rounds of 10,000 commands
				if f != nil {
					f.add(p, t, 0, j, outer)
					continue
				}
				if j == 0 {
					flush(t - 1)
				}
				if batch, err = mohito.AppendForward(batch, p, t, j, outer); err != nil {
					b.Fatal(err)
				}
				if idx = append(idx, j); len(idx) == 64 {
					flush(t)
				}
			}
			flush(uint64(1 + (b.N-1)/10000))
			select {
			case <-received:
			case <-ctx.Done():
				b.Fatalf("V* received %d of %d M2s", got.Load(), b.N)
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/M2")
		})
	}
}
