package loadgen

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// JetStreamBaseline measures the raw JetStream rate the pipeline is built
// on, on the same server and account as the run: n messages of size bytes
// published asynchronously to a file-backed stream, then consumed by one
// durable pull consumer with explicit acks. It returns messages per second
// over the whole publish+consume (DESIGN.md: performance as ratios against
// a baseline measured in the same run).
func JetStreamBaseline(ctx context.Context, url, user, password string, n, size int) (float64, error) {
	nc, err := nats.Connect(url, nats.UserInfo(user, password))
	if err != nil {
		return 0, fmt.Errorf("baseline connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	const stream = "LOADGEN_BASELINE"
	_ = js.DeleteStream(ctx, stream)
	defer js.DeleteStream(context.WithoutCancel(ctx), stream)
	if _, err := natsx.EnsureStream(ctx, js, stream, "loadgen.baseline.>"); err != nil {
		return 0, err
	}
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync("loadgen.baseline.x", payload, jetstream.WithMsgID(fmt.Sprintf("b-%d", i))); err != nil {
			return 0, fmt.Errorf("baseline publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "baseline", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096})
	if err != nil {
		return 0, err
	}
	got := 0
	for got < n && ctx.Err() == nil {
		b, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return 0, err
		}
		for m := range b.Messages() {
			_ = m.Ack()
			got++
		}
	}
	if err := nc.Flush(); err != nil {
		return 0, err
	}
	return float64(got) / time.Since(start).Seconds(), nil
}
