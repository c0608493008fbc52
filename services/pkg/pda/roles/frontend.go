package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/pda/ring"
	"github.com/obscura-iot/obscura/services/pkg/records"
)

// Eval tells a shard that every sub-batch of a sealed window has been routed: it evaluates
// f once it has applied all of them (spec §4.4, T-DIST-5).
type Eval struct {
	Window     uint64   `json:"window"`
	SubBatches []string `json:"sub_batches"`
	Entries    int      `json:"entries"`
}

type batchRecord struct {
	Routed  map[string]int `json:"routed"`
	Dropped int            `json:"dropped"`
}

// FrontendConfig configures a DB front-end.
type FrontendConfig struct {
	Workers int // goroutines decrypting one chunk
}

// Frontend is the DB front-end (spec §4.2 db-frontend, A8): it opens the mixer's chunks
// with a_DB, routes each entry to its shard by the consistent-hash ring and publishes one
// sub-batch per shard; on the Seal it waits until every chunk is routed and sends each
// shard its Eval. The ring a window uses is pinned the first time the window is routed
// (DBWindowsBucket "<w>.ring"), so a ring change takes effect at the next window and no
// row is ever split between shards (spec §4.3 v1).
type Frontend struct {
	cfg   FrontendConfig
	job   *Job
	sec   *DBSecrets
	js    jetstream.JetStream
	rings jetstream.KeyValue
	dbw   jetstream.KeyValue
	log   *slog.Logger
	m     *Metrics

	mu  sync.Mutex
	dbs map[uint64]*pda.DB
}

// NewFrontend wires a front-end on the DB account.
func NewFrontend(ctx context.Context, cfg FrontendConfig, job *Job, sec *DBSecrets, js jetstream.JetStream, log *slog.Logger, m *Metrics) (*Frontend, error) {
	if cfg.Workers < 1 {
		return nil, errors.New("invalid front-end config: workers must be ≥ 1")
	}
	rings, err := js.KeyValue(ctx, contract.RingBucket)
	if err != nil {
		return nil, fmt.Errorf("front-end: ring bucket: %w", err)
	}
	dbw, err := js.KeyValue(ctx, contract.DBWindowsBucket)
	if err != nil {
		return nil, fmt.Errorf("front-end: window bucket: %w", err)
	}
	return &Frontend{cfg: cfg, job: job, sec: sec, js: js, rings: rings, dbw: dbw, log: log, m: m, dbs: map[uint64]*pda.DB{}}, nil
}

func (f *Frontend) db(w uint64) (*pda.DB, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.dbs[w]; d != nil {
		return d, nil
	}
	s, err := f.job.Suite(w)
	if err != nil {
		return nil, err
	}
	d, err := pda.NewDB(s, f.sec.Key)
	if err != nil {
		return nil, err
	}
	if len(f.dbs) > 16 {
		clear(f.dbs)
	}
	f.dbs[w] = d
	return d, nil
}

// PublishRing stores a ring document in the ring bucket (the ring controller's job; the
// demo and tests call it directly). Versions must increase.
func PublishRing(ctx context.Context, kv jetstream.KeyValue, r *ring.Ring) error {
	b, err := r.MarshalJSON()
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, contract.RingKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		_, err = kv.Create(ctx, contract.RingKey, b)
		return err
	case err != nil:
		return err
	}
	old, err := ring.Decode(e.Value())
	if err == nil && old.Version() >= r.Version() {
		return fmt.Errorf("ring version %d is not newer than %d", r.Version(), old.Version())
	}
	_, err = kv.Update(ctx, contract.RingKey, b, e.Revision())
	return err
}

// PinnedRing returns the ring window w is routed with, pinning the current ring if the
// window has none yet.
func PinnedRing(ctx context.Context, dbw, rings jetstream.KeyValue, w uint64) (*ring.Ring, error) {
	key := strconv.FormatUint(w, 10) + ".ring"
	for {
		e, err := dbw.Get(ctx, key)
		if err == nil {
			return ring.Decode(e.Value())
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("pinned ring of window %d: %w", w, err)
		}
		if rings == nil {
			return nil, fmt.Errorf("window %d has no pinned ring", w)
		}
		cur, err := rings.Get(ctx, contract.RingKey)
		if err != nil {
			return nil, fmt.Errorf("current ring: %w", err)
		}
		if _, err := ring.Decode(cur.Value()); err != nil {
			return nil, err
		}
		if _, err := dbw.Create(ctx, key, cur.Value()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("pin ring of window %d: %w", w, err)
		}
	}
}

// Run consumes the ingest stream until ctx ends.
func (f *Frontend) Run(ctx context.Context) error {
	return natsx.Consume(ctx, f.js, natsx.ConsumerSpec{Stream: contract.IngestStream, Durable: "db-frontend",
		Filters: []string{"pda.v1.ingest.*"}, Batch: 4, AckWait: time.Minute}, f.log, f.handle)
}

func (f *Frontend) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	w, err := contract.WindowOf(m.Subject(), -1)
	if err != nil {
		return natsx.Drop
	}
	switch m.Headers().Get(contract.HdrKind) {
	case contract.KindChunk:
		return f.chunk(ctx, w, m.Headers().Get(contract.HdrBatch), m.Data())
	case contract.KindSeal:
		return f.seal(ctx, w, m.Data())
	}
	return natsx.Drop
}

func (f *Frontend) chunk(ctx context.Context, w uint64, batch string, data []byte) natsx.Outcome {
	if batch == "" || !contract.ValidShardID(batch) {
		return natsx.Drop
	}
	d, err := f.db(w)
	if err != nil {
		return natsx.Drop
	}
	suite, _ := f.job.Suite(w)
	items, err := records.Split(data, suite.BlindedItemSize(), math.MaxInt)
	if err != nil {
		f.m.Opened.WithLabelValues("malformed_chunk").Inc()
		return natsx.Drop
	}
	r, err := PinnedRing(ctx, f.dbw, f.rings, w)
	if err != nil {
		f.log.Warn("no ring", "window", w, "err", err)
		return natsx.Retry
	}
	n := len(items)
	ents := make([][]byte, n)
	owners := make([]string, n)
	var wg sync.WaitGroup
	per := (n + f.cfg.Workers - 1) / f.cfg.Workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				e, err := d.Open(items[i], r.Version())
				if err != nil {
					continue // out-of-domain value, identity: dropped and counted (T-MAL-4)
				}
				if ents[i], err = suite.MarshalEntry(e); err == nil {
					owners[i] = r.Owner(pda.KeyPosition(e.Y))
				}
			}
		})
	}
	wg.Wait()
	rec := batchRecord{Routed: map[string]int{}}
	out := map[string][][]byte{}
	for i := range n {
		if ents[i] == nil {
			rec.Dropped++
			continue
		}
		out[owners[i]] = append(out[owners[i]], ents[i])
		rec.Routed[owners[i]]++
	}
	f.m.Opened.WithLabelValues("routed").Add(float64(n - rec.Dropped))
	f.m.Opened.WithLabelValues("dropped").Add(float64(rec.Dropped))
	shards := make([]string, 0, len(out))
	for s := range out {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	for _, s := range shards {
		sub := batch + "-" + s
		hdr := nats.Header{}
		hdr.Set(contract.HdrKind, contract.KindSubBatch)
		hdr.Set(contract.HdrBatch, sub)
		if err := natsx.Publish(ctx, f.js, contract.ShardSubject(s, w), sub, slices.Concat(out[s]...), hdr); err != nil {
			return natsx.Retry
		}
	}
	b, _ := json.Marshal(rec)
	if _, err := f.dbw.Put(ctx, strconv.FormatUint(w, 10)+".batch."+batch, b); err != nil {
		return natsx.Retry
	}
	return natsx.Ack
}

func (f *Frontend) seal(ctx context.Context, w uint64, data []byte) natsx.Outcome {
	var s Seal
	if err := json.Unmarshal(data, &s); err != nil || s.Window != w {
		return natsx.Drop
	}
	r, err := PinnedRing(ctx, f.dbw, f.rings, w)
	if err != nil {
		return natsx.Retry
	}
	if _, err := f.dbw.Put(ctx, strconv.FormatUint(w, 10)+".seal", data); err != nil {
		return natsx.Retry
	}
	subs := map[string][]string{}
	counts := map[string]int{}
	total := 0
	for _, b := range s.Batches {
		e, err := f.dbw.Get(ctx, strconv.FormatUint(w, 10)+".batch."+b)
		if err != nil {
			return natsx.Retry // that chunk is not routed yet (T-DIST-5)
		}
		var rec batchRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return natsx.Drop
		}
		total += rec.Dropped
		for sh, n := range rec.Routed {
			subs[sh] = append(subs[sh], b+"-"+sh)
			counts[sh] += n
			total += n
		}
	}
	if total != s.Total {
		f.log.Error("seal accounting mismatch", "window", w, "sealed", s.Total, "routed", total)
		return natsx.Retry
	}
	for _, sh := range r.Shards() {
		ev, _ := json.Marshal(Eval{Window: w, SubBatches: subs[sh], Entries: counts[sh]})
		hdr := nats.Header{}
		hdr.Set(contract.HdrKind, contract.KindEval)
		if err := natsx.Publish(ctx, f.js, contract.ShardSubject(sh, w), "eval-"+strconv.FormatUint(w, 10)+"-"+sh, ev, hdr); err != nil {
			return natsx.Retry
		}
	}
	f.log.Info("window routed", "window", w, "items", s.Total, "shards", len(r.Shards()))
	return natsx.Ack
}
