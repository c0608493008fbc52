package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEnsureStreamCreatesKeepsAndReportsErrors: EnsureStream creates the stream and hands it
// to use; a second call finds the same stream with what the first published; an error of use
// comes back wrapped with the stream's name, and a refused connection as is.
func TestEnsureStreamCreatesKeepsAndReportsErrors(t *testing.T) {
	t.Parallel()
	n := StartNATS(t)
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}
	if err := EnsureStream(n.URL(), cfg, func(ctx context.Context, js jetstream.JetStream, _ jetstream.Stream) error {
		_, err := js.Publish(ctx, "s", []byte("kept"))
		return err
	}, nats.Name(t.Name())); err != nil {
		t.Fatalf("first EnsureStream: %v", err)
	}
	var msgs uint64
	if err := EnsureStream(n.URL(), cfg, func(ctx context.Context, _ jetstream.JetStream, s jetstream.Stream) error {
		info, err := s.Info(ctx)
		if err == nil {
			msgs = info.State.Msgs
		}
		return err
	}); err != nil || msgs != 1 {
		t.Fatalf("second EnsureStream: %v, stream S holds %d messages; want the 1 published", err, msgs)
	}
	boom := errors.New("boom")
	err := EnsureStream(n.URL(), cfg, func(context.Context, jetstream.JetStream, jetstream.Stream) error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "stream S") {
		t.Fatalf("EnsureStream with a failing use = %v; want boom, naming stream S", err)
	}
	url := n.URL()
	n.Stop()
	if err := EnsureStream(url, cfg, func(context.Context, jetstream.JetStream, jetstream.Stream) error { return nil }); !errors.Is(err, nats.ErrNoServers) {
		t.Fatalf("EnsureStream to a stopped server = %v; want %v", err, nats.ErrNoServers)
	}
}
