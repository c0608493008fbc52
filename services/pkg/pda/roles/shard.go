package roles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/pkg/records"
)

// ShardConfig configures one DB shard (one StatefulSet pod).
type ShardConfig struct {
	ID        string
	EvalRetry time.Duration // how often an unfinished window's Eval is re-examined
}

// Validate checks the configuration.
func (c *ShardConfig) Validate() error {
	if !contract.ValidShardID(c.ID) {
		return fmt.Errorf("invalid shard config: id %q must be 1–64 of [a-z0-9-]", c.ID)
	}
	if c.EvalRetry <= 0 {
		return errors.New("invalid shard config: eval retry must be > 0")
	}
	return nil
}

// Shard is one DB back-end shard (spec §4.2 db-shard, A9): it applies its sub-batches to
// its own Redis atomically, evaluates f once the window's Eval says everything is routed,
// sends a reveal request per qualifying row (re-randomised, fresh order, nothing the proxy
// could link), settles the oracle's answers idempotently per (window, request id), and
// publishes its results. Its logs carry counts only: no keys, blinded keys or tags.
type Shard struct {
	cfg     ShardConfig
	job     *Job
	js      jetstream.JetStream
	store   ShardStore
	dbw     jetstream.KeyValue
	results jetstream.KeyValue
	log     *slog.Logger
	m       *Metrics
}

// NewShard wires a shard on the DB account.
func NewShard(ctx context.Context, cfg ShardConfig, job *Job, js jetstream.JetStream, store ShardStore, log *slog.Logger, m *Metrics) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dbw, err := js.KeyValue(ctx, contract.DBWindowsBucket)
	if err != nil {
		return nil, fmt.Errorf("shard: window bucket: %w", err)
	}
	res, err := js.KeyValue(ctx, contract.ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("shard: results bucket: %w", err)
	}
	return &Shard{cfg: cfg, job: job, js: js, store: store, dbw: dbw, results: res, log: log.With("shard", cfg.ID), m: m}, nil
}

// Run consumes the shard's work subject and its reveal responses until ctx ends.
func (s *Shard) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() {
		errc <- natsx.Consume(ctx, s.js, natsx.ConsumerSpec{Stream: contract.ShardStream, Durable: "shard-" + s.cfg.ID,
			Filters: []string{"pda.v1.shard." + s.cfg.ID + ".*"}, Batch: 8, AckWait: time.Minute}, s.log, s.handleWork)
	}()
	go func() {
		errc <- natsx.Consume(ctx, s.js, natsx.ConsumerSpec{Stream: contract.RevealRespStream, Durable: "shard-" + s.cfg.ID + "-reveal",
			Filters: []string{"pda.v1.reveal.resp.*." + s.cfg.ID}, Batch: 32, AckWait: time.Minute}, s.log, s.handleResponse)
	}()
	return errors.Join(<-errc, <-errc)
}

func (s *Shard) handleWork(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	w, err := contract.WindowOf(m.Subject(), -1)
	if err != nil {
		return natsx.Drop
	}
	switch m.Headers().Get(contract.HdrKind) {
	case contract.KindSubBatch:
		return s.apply(ctx, w, m.Headers().Get(contract.HdrBatch), m.Data())
	case contract.KindEval:
		var ev Eval
		if err := json.Unmarshal(m.Data(), &ev); err != nil || ev.Window != w {
			return natsx.Drop
		}
		done, err := s.evaluate(ctx, ev)
		if err != nil {
			s.log.Warn("evaluate", "window", w, "err", err)
		}
		if done {
			return natsx.Ack
		}
		// Re-examined later: pending requests are re-published (identical bytes and ids,
		// so de-duplicated) until every row is settled, which covers a crash between
		// recording a request and publishing it.
		_ = m.NakWithDelay(s.cfg.EvalRetry)
		return natsx.Hold
	}
	return natsx.Drop
}

func (s *Shard) apply(ctx context.Context, w uint64, batch string, data []byte) natsx.Outcome {
	suite, err := s.job.Suite(w)
	if err != nil || batch == "" {
		return natsx.Drop
	}
	raws, err := records.Split(data, suite.EntrySize(), math.MaxInt)
	if err != nil {
		s.m.Entries.WithLabelValues("malformed").Inc()
		return natsx.Drop
	}
	r, err := PinnedRing(ctx, s.dbw, nil, w)
	if err != nil {
		return natsx.Retry
	}
	ents := make([]StoredEntry, 0, len(raws))
	for _, raw := range raws {
		e, err := suite.ParseEntry(raw)
		if err != nil {
			s.m.Entries.WithLabelValues("malformed").Inc()
			continue
		}
		if r.Owner(pda.KeyPosition(e.Y)) != s.cfg.ID {
			s.m.Entries.WithLabelValues("misrouted").Inc()
			continue
		}
		key := string(e.ID[:])
		if suite.Params().CountMode == pda.CountDistinctParticipants {
			key = string(e.Z)
		}
		ents = append(ents, StoredEntry{Y: string(e.Y), Key: key, Entry: raw})
	}
	fresh, err := s.store.Apply(ctx, w, batch, int(s.job.Threshold), ents)
	if err != nil {
		s.log.Warn("apply sub-batch", "window", w, "err", err)
		return natsx.Retry
	}
	if fresh {
		s.m.Entries.WithLabelValues("applied").Add(float64(len(ents)))
	} else {
		s.m.Entries.WithLabelValues("redelivered").Add(float64(len(ents)))
	}
	return natsx.Ack
}

// evaluate runs the window's reveal pass; done is true once the results are published.
func (s *Shard) evaluate(ctx context.Context, ev Eval) (bool, error) {
	w := ev.Window
	if ok, err := s.store.Marked(ctx, w, "published"); err != nil || ok {
		return ok, err
	}
	if ok, err := s.store.AppliedAll(ctx, w, ev.SubBatches); err != nil || !ok {
		return false, err
	}
	pending, err := s.store.Pending(ctx, w)
	if err != nil {
		return false, err
	}
	for _, req := range pending {
		if err := s.publishRequest(ctx, w, req); err != nil {
			return false, err
		}
	}
	suite, err := s.job.Suite(w)
	if err != nil {
		return false, err
	}
	cands, err := s.store.Candidates(ctx, w)
	if err != nil {
		return false, err
	}
	for _, y := range cands {
		keys, raws, err := s.store.Row(ctx, w, y)
		if err != nil {
			return false, err
		}
		inner := make([][]pda.Ciphertext, len(raws))
		for i, raw := range raws {
			e, err := suite.ParseEntry(raw)
			if err != nil {
				return false, err
			}
			inner[i] = e.Inner
		}
		req, id, order, err := suite.NewRevealRequest([]byte(y), inner, nil)
		if err != nil {
			return false, err
		}
		posKeys := make([]string, len(order))
		for i, j := range order {
			posKeys[i] = keys[j]
		}
		if err := s.store.Pend(ctx, w, y, hex.EncodeToString(id[:]), posKeys, req); err != nil {
			return false, err
		}
		if err := s.publishRequest(ctx, w, req); err != nil {
			return false, err
		}
		s.m.Reveals.WithLabelValues("sent").Inc()
	}
	if err := s.store.Mark(ctx, w, "evaluated"); err != nil {
		return false, err
	}
	s.log.Info("window evaluated", "window", w, "entries", ev.Entries, "reveal_requests", len(cands))
	return s.maybeFinish(ctx, w)
}

func (s *Shard) publishRequest(ctx context.Context, w uint64, req []byte) error {
	hdr := nats.Header{}
	hdr.Set(contract.HdrShard, s.cfg.ID)
	id := hex.EncodeToString(req[11:27]) // the request id (pda wire format)
	return natsx.Publish(ctx, s.js, contract.RevealReqSubject(w), "req-"+id, req, hdr)
}

func (s *Shard) handleResponse(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	w, err := contract.WindowOf(m.Subject(), -2)
	if err != nil {
		return natsx.Drop
	}
	resp, err := pda.ParseRevealResponse(m.Data())
	if err != nil || resp.Window != w {
		s.m.Reveals.WithLabelValues("malformed").Inc()
		return natsx.Drop
	}
	var drop []int
	for i, ok := range resp.Consistent {
		if !ok {
			drop = append(drop, i)
		}
	}
	var key []byte
	if !resp.Key.IsZero() {
		key = resp.Key.Canonical()
	}
	ok, err := s.store.Settle(ctx, w, hex.EncodeToString(resp.RequestID[:]), drop, key, int(s.job.Threshold))
	if err != nil {
		return natsx.Retry
	}
	if !ok {
		s.m.Reveals.WithLabelValues("stale").Inc() // superseded or already settled (§4.5)
		return natsx.Ack
	}
	s.m.Reveals.WithLabelValues("settled").Inc()
	if _, err := s.maybeFinish(ctx, w); err != nil {
		return natsx.Retry
	}
	return natsx.Ack
}

// maybeFinish publishes the shard's results once the window is evaluated and no request
// is outstanding, then the merged window result once every shard of the ring has.
func (s *Shard) maybeFinish(ctx context.Context, w uint64) (bool, error) {
	if ok, err := s.store.Marked(ctx, w, "evaluated"); err != nil || !ok {
		return false, err
	}
	if pend, err := s.store.Pending(ctx, w); err != nil || len(pend) > 0 {
		return false, err
	}
	suite, err := s.job.Suite(w)
	if err != nil {
		return false, err
	}
	rev, err := s.store.Revealed(ctx, w)
	if err != nil {
		return false, err
	}
	part := []contract.RevealedKey{}
	for y, canon := range rev {
		k, err := pda.ParseCanonicalKey(canon)
		if err != nil {
			continue
		}
		_, raws, err := s.store.Row(ctx, w, y)
		if err != nil {
			return false, err
		}
		rk := contract.RevealedKey{Key: k.Text(), Type: uint8(k.Type()), Count: len(raws)}
		if suite.HasValues() {
			for _, raw := range raws {
				if e, err := suite.ParseEntry(raw); err == nil {
					rk.Values = append(rk.Values, e.Value)
				}
			}
			slices.Sort(rk.Values)
		}
		part = append(part, rk)
	}
	contract.SortRevealed(part)
	b, _ := json.Marshal(part)
	wk := strconv.FormatUint(w, 10)
	if _, err := s.results.Put(ctx, wk+"."+s.cfg.ID, b); err != nil {
		return false, err
	}
	s.m.Results.Inc()
	if err := s.merge(ctx, w); err != nil {
		return false, err
	}
	if err := s.store.Mark(ctx, w, "published"); err != nil {
		return false, err
	}
	s.log.Info("results published", "window", w, "revealed", len(part))
	return true, nil
}

// merge writes the window's merged result when every shard of its ring has published; it
// is deterministic, so concurrent mergers write the same bytes.
func (s *Shard) merge(ctx context.Context, w uint64) error {
	r, err := PinnedRing(ctx, s.dbw, nil, w)
	if err != nil {
		return err
	}
	wk := strconv.FormatUint(w, 10)
	res := contract.WindowResult{Window: w, RingVersion: r.Version(), Shards: r.Shards(), Revealed: []contract.RevealedKey{}}
	for _, sh := range r.Shards() {
		e, err := s.results.Get(ctx, wk+"."+sh)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // another shard merges later
		}
		if err != nil {
			return err
		}
		var part []contract.RevealedKey
		if err := json.Unmarshal(e.Value(), &part); err != nil {
			return err
		}
		res.Revealed = append(res.Revealed, part...)
	}
	contract.SortRevealed(res.Revealed)
	b, _ := json.Marshal(res)
	if _, err := s.results.Put(ctx, wk, b); err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	msg := &nats.Msg{Subject: contract.ResultsSubject(w), Data: b, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, hex.EncodeToString(sum[:16]))
	return s.js.Conn().PublishMsg(msg)
}
