package natsx

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/clock"
)

// Lease is a leader lease: one key of a JetStream KV bucket whose TTL is the lease's. The holder
// creates the key, renews it every TTL/3 by compare-and-set, and deletes it when it stops, so a
// standby takes over at once after a graceful stop and within the TTL after a crash. This is the
// one leader election of the services (the coordinator, each vendor's agent and shuffler).
type Lease struct {
	kv  jetstream.KeyValue
	key string
	id  string
	ttl time.Duration
	log *slog.Logger
}

// NewLease opens (creating if needed) the lease bucket; id names this replica in the key. It
// retries with backoff until ctx ends: on a JetStream cluster a replicated bucket's creation
// waits for its group to elect a leader, which can outlast one request's timeout while every
// role of a deployment starts at once or a node is down.
func NewLease(ctx context.Context, js jetstream.JetStream, bucket, key, id string, ttl time.Duration, log *slog.Logger) (*Lease, error) {
	wait := 100 * time.Millisecond
	for {
		kv, err := EnsureKV(ctx, js, bucket, ttl)
		if err == nil {
			return &Lease{kv: kv, key: key, id: id, ttl: ttl, log: log}, nil
		}
		log.Warn("lease bucket not ready, retrying", "bucket", bucket, "err", err)
		if !clock.Sleep(ctx, wait) {
			return nil, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// Lead campaigns until it holds the lease, then runs f, releases the lease and campaigns again;
// again reports whether to campaign once more after f returned (nil: always). It returns when
// ctx ends. f's context ends when ctx ends or the lease is lost, and lost is closed only in the
// second case. The lease is renewed until f returns, so after a stop (ctx ended, lost open) f may
// finish its work in flight — a graceful handover — while no other replica leads.
func (l *Lease) Lead(ctx context.Context, f func(ctx context.Context, lost <-chan struct{}) error, again func() bool) {
	for ctx.Err() == nil {
		rev, err := l.kv.Create(ctx, l.key, []byte(l.id))
		if err != nil {
			if !clock.Sleep(ctx, l.ttl/4) {
				return
			}
			continue
		}
		l.log.Info("leader elected", "lease", l.key, "replica", l.id)
		fctx, stop := context.WithCancel(ctx)
		rctx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
		lost := make(chan struct{})
		last := make(chan uint64, 1)
		go func() {
			last <- l.renew(rctx, rev, func() { close(lost); stop() })
		}()
		err = f(fctx, lost)
		stop()
		stopRenew()
		if err != nil && ctx.Err() == nil {
			l.log.Error("leadership ended", "lease", l.key, "err", err)
		}
		// Release the lease (only the revision this replica wrote: a lost lease may already
		// be another replica's) so a standby takes over at once.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.kv.Delete(dctx, l.key, jetstream.LastRevision(<-last))
		dcancel()
		if again != nil && !again() {
			return
		}
	}
}

// renew keeps the lease until ctx ends or an update fails (then it calls lost), and returns the
// last revision it wrote.
func (l *Lease) renew(ctx context.Context, rev uint64, lost func()) uint64 {
	tk := time.NewTicker(l.ttl / 3)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-tk.C:
		}
		r, err := l.kv.Update(ctx, l.key, []byte(l.id), rev)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("leader lease lost", "lease", l.key, "err", err)
				lost()
			}
			return rev
		}
		rev = r
	}
}
