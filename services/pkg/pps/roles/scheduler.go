package roles

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/clock"
)

// The scheduler runs each pipeline's executions on its schedule (D15): ticks are the
// multiples of the pipeline's Schedule since the Unix epoch, and tick k's execution reads
// the inputs received in the Window before it. One broker replica schedules at a time: it
// holds a Redis lease whose value carries a fencing token, and claims each tick with a check
// of that value in Redis, so neither a deposed leader that has not noticed yet nor a new
// leader re-reading the schedule can run a tick twice. An execution's output also carries a
// JetStream message id per (function, tick), so a retried publish is not a duplicate.

// runScheduler campaigns for the lease and schedules while it holds it.
func (b *Broker) runScheduler(ctx context.Context) error {
	defer b.inflight.Wait()
	retry := min(b.opt.LeaseTTL/3, time.Second)
	for ctx.Err() == nil {
		lease, ok, err := b.store.AcquireLeader(ctx, b.opt.Replica, b.opt.LeaseTTL)
		if err != nil {
			b.log.Warn("scheduler lease", "err", err)
		}
		if !ok {
			if !clock.Sleep(ctx, retry) {
				break
			}
			continue
		}
		b.log.Info("scheduler lease taken", "replica", b.opt.Replica)
		b.m.Leader.Set(1)
		b.lead(ctx, lease)
		b.m.Leader.Set(0)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := b.store.ReleaseLeader(rctx, lease); err != nil {
			b.log.Warn("release scheduler lease", "err", err)
		}
		cancel()
		b.log.Info("scheduler lease given up", "replica", b.opt.Replica)
	}
	return nil
}

// lead schedules every pipeline until the lease is lost or ctx ends, restarting the
// per-pipeline loops when the pipelines change.
func (b *Broker) lead(ctx context.Context, lease string) {
	lctx, lost := context.WithCancel(ctx)
	defer lost()
	go b.renew(lctx, lease, lost)
	for lctx.Err() == nil {
		set, gen := b.currentGen()
		sctx, stop := context.WithCancel(lctx)
		var wg sync.WaitGroup
		for _, f := range set.fns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.schedule(sctx, ctx, lease, f, lost)
			}()
		}
		select {
		case <-lctx.Done():
		case <-gen:
		}
		stop()
		wg.Wait()
	}
}

// renew keeps the lease; it calls lost when another replica holds it, or when Redis could
// not confirm it for a whole TTL.
func (b *Broker) renew(ctx context.Context, lease string, lost context.CancelFunc) {
	ttl := b.opt.LeaseTTL
	confirmed := time.Now()
	for clock.Sleep(ctx, ttl/3) {
		ok, err := b.store.RenewLeader(ctx, lease, ttl)
		switch {
		case err == nil && !ok:
			b.log.Warn("scheduler lease lost")
			lost()
			return
		case err != nil:
			if time.Since(confirmed) > ttl {
				b.log.Warn("scheduler lease not confirmed for a TTL", "err", err)
				lost()
				return
			}
		default:
			confirmed = time.Now()
		}
	}
}

// schedule runs one pipeline's ticks. Executions run on execCtx (the broker's), so a tick
// already claimed finishes even if the lease is lost meanwhile; they wait for a worker.
func (b *Broker) schedule(ctx, execCtx context.Context, lease string, f *brokerFunction, lost context.CancelFunc) {
	period := f.p.Schedule.Duration
	for {
		now := b.clk.Now()
		tick := uint64(now.UnixNano()/int64(period)) + 1
		at := time.Unix(0, int64(tick)*int64(period))
		select {
		case <-ctx.Done():
			return
		case <-b.clk.After(at.Sub(now)):
		}
		if st, _ := f.state(); st != FunctionRegistered {
			continue
		}
		ok, err := b.store.ClaimTick(ctx, lease, f.f.ID, tick)
		if errors.Is(err, ErrNotLeader) {
			lost()
			return
		}
		if err != nil {
			b.log.Warn("claim tick", "pipeline", f.p.Name, "err", err)
			continue
		}
		if !ok {
			continue
		}
		select {
		case b.workers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		b.inflight.Add(1)
		go func() {
			defer func() { <-b.workers; b.inflight.Done() }()
			b.execute(execCtx, f, tick, at)
		}()
	}
}
