package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// statusBook keeps the counters and writes them to BucketStatus. Counters
// are restored from the bucket at start so a new leader continues them.
type statusBook struct {
	kv     jetstream.KeyValue
	series string
	period time.Duration
	// deadline is the vendors' fixed response deadline (Deployment.ResponseDeadline).
	deadline time.Duration
	log      *slog.Logger

	mu        sync.Mutex
	s         contract.SeriesStatus
	vendors   []contract.VendorStatus
	shufflers []contract.ShufflerStatus
}

func newStatusBook(ctx context.Context, js jetstream.JetStream, d *Deployment, log *slog.Logger) (*statusBook, error) {
	series := d.Series
	if series == "" {
		series = "default"
	}
	kv, err := natsx.EnsureKV(ctx, js, contract.BucketStatus, 0)
	if err != nil {
		return nil, err
	}
	b := &statusBook{kv: kv, series: series, period: d.Round, deadline: d.ResponseDeadline, log: log,
		vendors: make([]contract.VendorStatus, d.Params.Vendors), shufflers: make([]contract.ShufflerStatus, d.Params.Vendors)}
	load := func(key string, into any) error {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read status %s: %w", key, err)
		}
		_ = json.Unmarshal(e.Value(), into) // a malformed entry restarts its counters
		return nil
	}
	if err := load(contract.StatusSeriesKey(series), &b.s); err != nil {
		return nil, err
	}
	for v := range b.vendors {
		if err := load(contract.StatusVendorKey(v), &b.vendors[v]); err != nil {
			return nil, err
		}
		if err := load(contract.StatusShufflerKey(v), &b.shufflers[v]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *statusBook) put(ctx context.Context, key string, v any) {
	data, err := json.Marshal(v)
	if err == nil {
		_, err = b.kv.Put(ctx, key, data)
	}
	if err != nil && ctx.Err() == nil {
		b.log.Warn("status not written", "key", key, "err", err)
	}
}

// writeLocked writes the series key and the given vendors' keys; b.mu held.
func (b *statusBook) writeLocked(ctx context.Context, vendors ...int) {
	b.s.Updated = time.Now().UTC().Format(time.RFC3339)
	b.put(ctx, contract.StatusSeriesKey(b.series), b.s)
	for _, v := range vendors {
		if v >= 0 && v < len(b.vendors) {
			b.put(ctx, contract.StatusVendorKey(v), b.vendors[v])
			b.put(ctx, contract.StatusShufflerKey(v), b.shufflers[v])
		}
	}
}

func (b *statusBook) opened(ctx context.Context, t uint64, shuffler int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.CurrentRound = max(b.s.CurrentRound, t)
	b.s.OpenedRounds++
	b.vendors[shuffler].ShufflerDuty++
	b.shufflers[shuffler].LastRound, b.shufflers[shuffler].LastResult = t, contract.ShuffleOpen
	b.writeLocked(ctx, shuffler)
}

// openedRounds is how many rounds the series has opened, restored at start: MaxRounds counts
// it, so a restarted or new leader does not run the series' rounds again.
func (b *statusBook) openedRounds() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.OpenedRounds
}

// capacityClass is the class the series had when this book was loaded.
func (b *statusBook) capacityClass() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.CapacityClass
}

func (b *statusBook) aborted(ctx context.Context, t uint64, shuffler int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.AbortedRounds++
	if shuffler >= 0 && shuffler < len(b.shufflers) {
		b.shufflers[shuffler].LastRound, b.shufflers[shuffler].LastResult = t, contract.ShuffleAborted
	}
	b.writeLocked(ctx, shuffler)
}

// plannedClass is the series' capacity class after a planned round, and its change if the
// round changed it.
type plannedClass struct {
	idx, percent int
	change       *CapacityChange
}

// planned records a planned round's figures and, with capacity classes, the class: one status
// write per planned round.
func (b *statusBook) planned(ctx context.Context, rep RoundReport, class *plannedClass) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if class != nil {
		b.s.CapacityClass, b.s.CapacityPercent = class.idx, class.percent
		if ch := class.change; ch != nil {
			b.s.CapacityChange = &contract.CapacityChange{At: ch.At.UTC().Format(time.RFC3339), FromPercent: ch.FromPercent,
				ToPercent: ch.ToPercent, Rounds: ch.Rounds, BurstRate: math.Round(ch.BurstRate*1000) / 1000,
				MinFakeRatio: math.Round(ch.MinFakeRatio*1000) / 1000}
		}
	}
	if rep.N > 0 {
		b.s.FakeRatio = math.Round(float64(rep.N-rep.Valid)/float64(rep.N)*1000) / 1000
	}
	if rep.S > 0 {
		b.s.Bursts++
	}
	b.writeLocked(ctx)
}

// completed records a round whose every response reached a mailbox:
// lastRoundSeconds runs from open to done, lastProcessingSeconds from close to
// done less the response deadline, commandsPerSecond is the round's valid
// commands over the period (rounds are pipelined one per period).
func (b *statusBook) completed(ctx context.Context, rep RoundReport, done time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.CompletedRounds++
	b.s.LastRoundSeconds = math.Round(done.Sub(rep.Opened).Seconds()*1000) / 1000
	b.s.LastProcessingSeconds = math.Round(max(done.Sub(rep.Closed)-b.deadline, 0).Seconds()*1000) / 1000
	if b.period > 0 {
		b.s.CommandsPerSecond = int64(math.Round(float64(rep.Valid) / b.period.Seconds()))
	}
	all := make([]int, len(b.vendors))
	for v := range b.vendors {
		b.vendors[v].RoundsServed++
		all[v] = v
	}
	if s := rep.Shuffler; s >= 0 && s < len(b.shufflers) {
		b.shufflers[s].RoundsShuffled++
		b.shufflers[s].LastRound, b.shufflers[s].LastResult = rep.T, contract.ShuffleCompleted
	}
	b.writeLocked(ctx, all...)
}
