package natsx

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoConsumer: none of the consumers Backlog was asked about exists (yet).
var ErrNoConsumer = errors.New("no such consumer")

// Backlog sums the messages not yet delivered to the named durable consumers of stream — the
// load signal of the operator's autoscalers (decrypt workers, encoders, PDA shards). Consumers
// that do not exist yet are skipped; ErrNoConsumer when none exists.
func Backlog(ctx context.Context, js jetstream.JetStream, stream string, consumers ...string) (int64, error) {
	var n int64
	found := false
	for _, name := range consumers {
		c, err := js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("consumer %s/%s: %w", stream, name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("consumer %s/%s info: %w", stream, name, err)
		}
		n += int64(info.NumPending)
		found = true
	}
	if !found {
		return 0, ErrNoConsumer
	}
	return n, nil
}
