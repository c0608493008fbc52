package roles

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
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

// roundCache holds the RoundInfo of recent rounds: who V* is (M4 must come
// from it) and which key epoch the round names.
type roundCache struct {
	kv jetstream.KeyValue
	mu sync.Mutex
	m  map[uint64]*mohito.RoundInfo
}

// info returns round t's RoundInfo; fresh is true the first time it is read.
func (s *roundCache) info(ctx context.Context, t uint64) (ri *mohito.RoundInfo, fresh bool, err error) {
	s.mu.Lock()
	ri, ok := s.m[t]
	s.mu.Unlock()
	if ok {
		return ri, false, nil
	}
	e, err := s.kv.Get(ctx, "t."+strconv.FormatUint(t, 10))
	if err != nil {
		return nil, false, err
	}
	if ri, err = mohito.ParseRoundInfo(e.Value()); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	if len(s.m) > 256 {
		clear(s.m)
	}
	s.m[t] = ri
	s.mu.Unlock()
	return ri, true, nil
}
