package roles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// Seal is the mixer's last message of a window (spec §4.4 window mode): the DB evaluates f
// only once every listed chunk has been ingested.
type Seal struct {
	Window  uint64   `json:"window"`
	Total   int      `json:"total"`
	Batches []string `json:"batches"`
}

// MixerConfig configures the proxy mixer.
type MixerConfig struct {
	ChunkItems int           // items per DB ingest message (≤ 1 MB each)
	Poll       time.Duration // how often Run looks for windows to seal
}

// Validate checks the configuration.
func (c *MixerConfig) Validate() error {
	if c.ChunkItems < 1 || c.ChunkItems > 4000 || c.Poll <= 0 {
		return errors.New("invalid mixer config: chunk items must be in [1, 4000] and poll > 0")
	}
	return nil
}

// Mixer is the proxy mixer in window mode (spec §4.4, A7): when a window closes it takes
// all of the window's pool items, permutes them uniformly, strips every proxy-internal
// header, publishes them in chunks to the DB ingest subject and then a Seal, and only then
// drops them from the pool. The permutation is drawn from a PRG keyed by K_mix and the
// window's item set, so a mixer that crashes mid-seal and starts over republishes exactly
// the same chunks under the same ids (JetStream de-duplicates them; shards de-duplicate
// entries anyway). To the DB it is a uniform permutation: the key is secret.
type Mixer struct {
	cfg     MixerConfig
	job     *Job
	sec     *ProxySecrets
	js      jetstream.JetStream
	windows jetstream.KeyValue
	log     *slog.Logger
	m       *Metrics
	now     func() time.Time
}

// NewMixer wires a mixer. Its js must be the proxy account's (it publishes into the DB
// domain only through the imported ingest subject).
func NewMixer(ctx context.Context, cfg MixerConfig, job *Job, sec *ProxySecrets, js jetstream.JetStream, log *slog.Logger, m *Metrics) (*Mixer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, contract.WindowsBucket)
	if err != nil {
		return nil, fmt.Errorf("mixer: window bucket: %w", err)
	}
	return &Mixer{cfg: cfg, job: job, sec: sec, js: js, windows: kv, log: log, m: m, now: time.Now}, nil
}

func (x *Mixer) record(ctx context.Context, w uint64) (contract.WindowRecord, uint64, error) {
	var rec contract.WindowRecord
	e, err := x.windows.Get(ctx, strconv.FormatUint(w, 10))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, 0, nil
	}
	if err != nil {
		return rec, 0, fmt.Errorf("window %d state: %w", w, err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, 0, fmt.Errorf("window %d state: %w", w, err)
	}
	return rec, e.Revision(), nil
}

func (x *Mixer) store(ctx context.Context, w uint64, rec contract.WindowRecord, rev uint64) (uint64, error) {
	b, _ := json.Marshal(rec)
	key := strconv.FormatUint(w, 10)
	if rev == 0 {
		return x.windows.Create(ctx, key, b)
	}
	return x.windows.Update(ctx, key, b, rev)
}

// Close marks window w closed (ingress stops accepting it) and returns the record.
func (x *Mixer) Close(ctx context.Context, w uint64) error {
	for {
		rec, rev, err := x.record(ctx, w)
		if err != nil {
			return err
		}
		if rec.State != "" && rec.State != contract.WindowOpen {
			return nil
		}
		rec = contract.WindowRecord{State: contract.WindowClosed, ClosedAt: x.now()}
		if _, err := x.store(ctx, w, rec, rev); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
	}
}

// Seal closes window w (if it is not yet), waits the grace period, then shuffles and
// forwards it. It is idempotent and resumable.
func (x *Mixer) Seal(ctx context.Context, w uint64) error {
	if err := x.Close(ctx, w); err != nil {
		return err
	}
	rec, rev, err := x.record(ctx, w)
	if err != nil {
		return err
	}
	if rec.State == contract.WindowSealed {
		return nil
	}
	if wait := time.Until(rec.ClosedAt.Add(x.job.Grace)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	stream, err := x.js.Stream(ctx, contract.PoolStream)
	if err != nil {
		return fmt.Errorf("pool stream: %w", err)
	}
	subj := contract.PoolSubject(w)
	if rec.State == contract.WindowClosed {
		// Fix the window's item set: everything in the pool up to now.
		last, err := stream.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			rec.LastSeq = 0
		case err != nil:
			return fmt.Errorf("pool tail of window %d: %w", w, err)
		default:
			rec.LastSeq = last.Sequence
		}
		rec.State = contract.WindowSealing
		if rev, err = x.store(ctx, w, rec, rev); err != nil {
			return fmt.Errorf("record seal point of window %d: %w", w, err)
		}
	}
	suite, err := x.job.Suite(w)
	if err != nil {
		return err
	}
	items, err := x.read(ctx, stream, subj, rec.LastSeq, suite.BlindedItemSize())
	if err != nil {
		return err
	}
	batches, err := x.forward(ctx, w, items)
	if err != nil {
		return err
	}
	rec.State, rec.Total, rec.Batches = contract.WindowSealed, len(items), batches
	if _, err := x.store(ctx, w, rec, rev); err != nil {
		return fmt.Errorf("record sealed window %d: %w", w, err)
	}
	// Acknowledge the pool only now that the DB side holds everything (A7).
	if rec.LastSeq > 0 {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(rec.LastSeq+1)); err != nil {
			x.log.Warn("purge pool", "window", w, "err", err)
		}
	}
	x.m.Sealed.Inc()
	x.m.Mixed.Add(float64(len(items)))
	x.log.Info("window sealed", "window", w, "items", len(items), "chunks", len(batches))
	return nil
}

// read returns the window's items up to pool sequence last.
func (x *Mixer) read(ctx context.Context, stream jetstream.Stream, subj string, last uint64, size int) ([][]byte, error) {
	var items [][]byte
	if last == 0 {
		return items, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, fmt.Errorf("read pool: %w", err)
	}
	for {
		b, err := cons.Fetch(512, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read pool: %w", err)
		}
		n := 0
		for msg := range b.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read pool: %w", err)
			}
			if md.Sequence.Stream > last {
				x.m.Late.Add(float64(len(msg.Data()) / size))
				return items, nil
			}
			d := msg.Data()
			for i := 0; i+size <= len(d); i += size {
				items = append(items, d[i:i+size:i+size])
			}
			if md.Sequence.Stream == last {
				return items, nil
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("read pool: %w", err)
		}
		if n == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// shuffleWindow permutes window w's items in place (pda.Shuffle) with a PRG seeded by
// HMAC(K_mix, w, digest of the window's item set), so a resumed seal republishes the same
// order, and returns that digest.
func (s *ProxySecrets) shuffleWindow(w uint64, items [][]byte) ([]byte, error) {
	hs := make([][32]byte, len(items))
	for i, it := range items {
		hs[i] = sha256.Sum256(it)
	}
	slices.SortFunc(hs, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	d := sha256.New()
	for _, h := range hs {
		d.Write(h[:])
	}
	digest := d.Sum(nil)
	var seed [32]byte
	copy(seed[:], s.mac([]byte("PDA-V1-shuffle"), binary.BigEndian.AppendUint64(nil, w), digest))
	return digest, pda.Shuffle(items, rand.NewChaCha8(seed))
}

// forward shuffles and publishes the window, returning the chunk ids.
func (x *Mixer) forward(ctx context.Context, w uint64, items [][]byte) ([]string, error) {
	digest, err := x.sec.shuffleWindow(w, items)
	if err != nil {
		return nil, err
	}
	wb := binary.BigEndian.AppendUint64(nil, w)
	var batches []string
	for i, c := 0, 0; i < len(items); i, c = i+x.cfg.ChunkItems, c+1 {
		chunk := items[i:min(i+x.cfg.ChunkItems, len(items))]
		id := hex.EncodeToString(x.sec.mac([]byte("PDA-V1-batch"), wb, digest, binary.BigEndian.AppendUint32(nil, uint32(c)))[:16])
		hdr := nats.Header{}
		hdr.Set(contract.HdrKind, contract.KindChunk)
		hdr.Set(contract.HdrBatch, id)
		if err := natsx.Publish(ctx, x.js, contract.IngestSubject(w), id, slices.Concat(chunk...), hdr); err != nil {
			return nil, fmt.Errorf("forward window %d: %w", w, err)
		}
		batches = append(batches, id)
	}
	seal, _ := json.Marshal(Seal{Window: w, Total: len(items), Batches: batches})
	hdr := nats.Header{}
	hdr.Set(contract.HdrKind, contract.KindSeal)
	if err := natsx.Publish(ctx, x.js, contract.IngestSubject(w), "seal-"+strconv.FormatUint(w, 10)+"-"+hex.EncodeToString(digest[:8]), seal, hdr); err != nil {
		return nil, fmt.Errorf("seal window %d: %w", w, err)
	}
	return batches, nil
}

// Run seals every window whose end has passed, and resumes seals a crash interrupted,
// until ctx ends.
func (x *Mixer) Run(ctx context.Context) error {
	t := time.NewTicker(x.cfg.Poll)
	defer t.Stop()
	for {
		for _, w := range x.due(ctx) {
			if err := x.Seal(ctx, w); err != nil && ctx.Err() == nil {
				x.log.Warn("seal failed, will retry", "window", w, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (x *Mixer) due(ctx context.Context) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	add := func(w uint64) {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	if keys, err := x.windows.Keys(ctx); err == nil {
		for _, k := range keys {
			w, err := strconv.ParseUint(k, 10, 64)
			if err != nil {
				continue
			}
			if rec, _, err := x.record(ctx, w); err == nil && (rec.State == contract.WindowClosed || rec.State == contract.WindowSealing) {
				add(w)
			}
		}
	}
	if s, err := x.js.Stream(ctx, contract.PoolStream); err == nil {
		if info, err := s.Info(ctx, jetstream.WithSubjectFilter("pda.v1.pool.*")); err == nil {
			now := x.now()
			for subj := range info.State.Subjects {
				w, err := contract.WindowOf(subj, -1)
				if err == nil && !now.Before(x.job.End(w)) {
					if rec, _, err := x.record(ctx, w); err == nil && rec.State != contract.WindowSealed {
						add(w)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
