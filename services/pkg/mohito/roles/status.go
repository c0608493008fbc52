package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Status names read by the operator's Round, Vendor and Shuffler controllers
// (docs/services.md). The coordinator writes them after every round event.
const (
	BucketStatus = "mohito_status"
	// ConsumerDecryptWorkers is the decrypt workers' durable pull consumer on
	// StreamIntegratorIn; the operator scales on its NumPending/NumAckPending.
	ConsumerDecryptWorkers = "decrypt-workers"
)

// StatusSeriesKey, StatusVendorKey and StatusShufflerKey are the keys of BucketStatus.
func StatusSeriesKey(series string) string { return "series." + series }
func StatusVendorKey(v int) string         { return "vendor." + strconv.Itoa(v) }
func StatusShufflerKey(v int) string       { return "shuffler." + strconv.Itoa(v) }

// SeriesStatus is the value of series.<series>.
type SeriesStatus struct {
	CurrentRound      uint64  `json:"currentRound"`
	CompletedRounds   int64   `json:"completedRounds"`
	AbortedRounds     int64   `json:"abortedRounds"`
	LastRoundSeconds  float64 `json:"lastRoundSeconds"`
	CommandsPerSecond int64   `json:"commandsPerSecond"`
	FakeRatio         float64 `json:"fakeRatio"`
	Bursts            int64   `json:"bursts"`
	Updated           string  `json:"updated"`
}

// VendorStatus is the value of vendor.<index>.
type VendorStatus struct {
	RoundsServed  int64  `json:"roundsServed"`
	ShufflerDuty  int64  `json:"shufflerDuty"`
	ActiveDevices *int64 `json:"activeDevices,omitempty"`
}

// ShufflerStatus is the value of shuffler.<index>: the duty of vendor
// index's shuffler service.
type ShufflerStatus struct {
	RoundsShuffled int64  `json:"roundsShuffled"` // rounds it shuffled that completed
	LastRound      uint64 `json:"lastRound"`
	LastResult     string `json:"lastResult"` // Completed | Aborted | Open
}

// statusBook keeps the counters and writes them to BucketStatus. Counters
// are restored from the bucket at start so a new leader continues them.
type statusBook struct {
	kv     jetstream.KeyValue
	series string
	period time.Duration
	log    *slog.Logger

	mu        sync.Mutex
	s         SeriesStatus
	vendors   []VendorStatus
	shufflers []ShufflerStatus
}

func newStatusBook(ctx context.Context, js jetstream.JetStream, d *Deployment, log *slog.Logger) (*statusBook, error) {
	series := d.Series
	if series == "" {
		series = "default"
	}
	kv, err := natsx.EnsureKV(ctx, js, BucketStatus, 0)
	if err != nil {
		return nil, err
	}
	b := &statusBook{kv: kv, series: series, period: d.Round, log: log,
		vendors: make([]VendorStatus, d.Params.Vendors), shufflers: make([]ShufflerStatus, d.Params.Vendors)}
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
	if err := load(StatusSeriesKey(series), &b.s); err != nil {
		return nil, err
	}
	for v := range b.vendors {
		if err := load(StatusVendorKey(v), &b.vendors[v]); err != nil {
			return nil, err
		}
		if err := load(StatusShufflerKey(v), &b.shufflers[v]); err != nil {
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
	b.put(ctx, StatusSeriesKey(b.series), b.s)
	for _, v := range vendors {
		if v >= 0 && v < len(b.vendors) {
			b.put(ctx, StatusVendorKey(v), b.vendors[v])
			b.put(ctx, StatusShufflerKey(v), b.shufflers[v])
		}
	}
}

func (b *statusBook) opened(ctx context.Context, t uint64, shuffler int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.CurrentRound = max(b.s.CurrentRound, t)
	b.vendors[shuffler].ShufflerDuty++
	b.shufflers[shuffler].LastRound, b.shufflers[shuffler].LastResult = t, "Open"
	b.writeLocked(ctx, shuffler)
}

func (b *statusBook) aborted(ctx context.Context, t uint64, shuffler int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.AbortedRounds++
	if shuffler >= 0 && shuffler < len(b.shufflers) {
		b.shufflers[shuffler].LastRound, b.shufflers[shuffler].LastResult = t, "Aborted"
	}
	b.writeLocked(ctx, shuffler)
}

func (b *statusBook) planned(ctx context.Context, rep RoundReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rep.N > 0 {
		b.s.FakeRatio = math.Round(float64(rep.N-rep.Valid)/float64(rep.N)*1000) / 1000
	}
	if rep.S > 0 {
		b.s.Bursts++
	}
	b.writeLocked(ctx)
}

// completed records a round whose every response reached a mailbox:
// lastRoundSeconds runs from open to done, commandsPerSecond is the round's
// valid commands over the period (rounds are pipelined one per period).
func (b *statusBook) completed(ctx context.Context, rep RoundReport, done time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.CompletedRounds++
	b.s.LastRoundSeconds = math.Round(done.Sub(rep.Opened).Seconds()*1000) / 1000
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
		b.shufflers[s].LastRound, b.shufflers[s].LastResult = rep.T, "Completed"
	}
	b.writeLocked(ctx, all...)
}
