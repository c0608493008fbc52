package roles

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
)

// WorkerConfig configures the integrator's stateless and partitioned workers.
type WorkerConfig struct {
	Deployment Deployment
	JS         jetstream.JetStream // integrator account
	Store      roundstate.Store
	Keys       *mohito.KeyRing // sk_I by epoch (decrypt workers)
	Partition  int             // encoder partition p
	AckWait    time.Duration
	Log        *slog.Logger
	Metrics    *Metrics
}

func (c *WorkerConfig) ackWait() time.Duration {
	if c.AckWait == 0 {
		return 10 * time.Second
	}
	return c.AckWait
}
