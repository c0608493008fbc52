package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream is one try, for Eventually, of what a service does at start: connect to url
// (one or more, comma-separated; opts such as nats.UserInfo added), ensure the stream cfg
// (CreateOrUpdateStream) and use it, with use given the JetStream context and the stream
// under one 5-second deadline. The connection is closed when it returns. It fails no test:
// every error is returned, naming the server it went through.
func EnsureStream(url string, cfg jetstream.StreamConfig, use func(ctx context.Context, js jetstream.JetStream, s jetstream.Stream) error, opts ...nats.Option) error {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ensure stream %s (via %s): %w", cfg.Name, nc.ConnectedServerName(), err)
	}
	if err := use(ctx, js, s); err != nil {
		return fmt.Errorf("stream %s (via %s): %w", cfg.Name, nc.ConnectedServerName(), err)
	}
	return nil
}
