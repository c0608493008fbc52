package roles

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
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

// DecryptWorker is Stage A (spec §4.5): stateless, any number of replicas
// share one durable pull consumer, and each M4 message is one contiguous
// range of output positions — positions are already unlinkable to users, so
// partitioning by position is safe.
type DecryptWorker struct {
	cfg    WorkerConfig
	rounds *roundCache

	mu    sync.Mutex
	integ map[*mohito.PrivateKey]*mohito.Integrator
}

// NewDecryptWorker returns a Stage A worker.
func NewDecryptWorker(ctx context.Context, cfg WorkerConfig) (*DecryptWorker, error) {
	if cfg.Keys == nil || cfg.Keys.Len() == 0 {
		return nil, errors.New("decrypt worker: no integrator key")
	}
	if cfg.Keys.Suite() != cfg.Deployment.Params.Suite {
		return nil, fmt.Errorf("decrypt worker: %v keys for a %v deployment", cfg.Keys.Suite(), cfg.Deployment.Params.Suite)
	}
	kv, err := natsx.EnsureKV(ctx, cfg.JS, contract.BucketRoundInfo, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return &DecryptWorker{cfg: cfg, rounds: &roundCache{kv: kv, m: map[uint64]*mohito.RoundInfo{}}, integ: map[*mohito.PrivateKey]*mohito.Integrator{}}, nil
}

// integrator returns Stage A for the key of round ri's integrator epoch. A
// round naming an epoch this worker does not hold is an error the caller
// retries: another replica (a newer pod) may hold it.
func (w *DecryptWorker) integrator(ri *mohito.RoundInfo) (*mohito.Integrator, error) {
	k, err := w.cfg.Keys.KeyFor(ri.IntegratorEpoch, ri.IntegratorKey)
	if err != nil {
		return nil, fmt.Errorf("round %d: %w", ri.T, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.integ[k]
	if in == nil {
		if in, err = mohito.NewIntegrator(w.cfg.Deployment.Params, k); err != nil {
			return nil, err
		}
		if len(w.integ) > 2*mohito.MaxKeyEpochs {
			clear(w.integ)
		}
		w.integ[k] = in
	}
	return in, nil
}

// Run consumes until ctx ends.
func (w *DecryptWorker) Run(ctx context.Context) error {
	return natsx.Consume(ctx, w.cfg.JS, natsx.ConsumerSpec{
		Stream: contract.StreamIntegratorIn, Durable: contract.ConsumerDecryptWorkers, Filters: []string{contract.FromVendors(contract.KindShuffled)},
		AckWait: w.cfg.ackWait(), Batch: 4, MaxAck: 64,
	}, w.cfg.Log, w.handle)
}

func (w *DecryptWorker) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	start := time.Now()
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	ri, fresh, err := w.rounds.info(ctx, p.T)
	if err != nil {
		return natsx.Retry
	}
	if fresh {
		if dropped := w.cfg.Keys.Observe(p.T, ri.IntegratorEpoch); len(dropped) > 0 {
			w.cfg.Log.Info("integrator key epochs retired", "epochs", dropped, "round", p.T)
			w.mu.Lock()
			clear(w.integ) // no reference to a retired key stays
			w.mu.Unlock()
		}
	}
	if int(ri.Shuffler) != p.Vendor {
		w.cfg.Metrics.Dropped.WithLabelValues("not_shuffler").Inc()
		return natsx.Drop
	}
	data := m.Data()
	batchStart, ok := mohito.BatchStart(data)
	if !ok {
		return natsx.Drop
	}
	integ, err := w.integrator(ri)
	if err != nil {
		w.cfg.Metrics.Dropped.WithLabelValues("key_epoch").Inc()
		w.cfg.Log.Error("cannot decrypt round: key epoch not held", "t", p.T, "epoch", ri.IntegratorEpoch, "held", w.cfg.Keys.Epochs(), "err", err)
		return natsx.Retry
	}
	cmds, void, err := integ.OpenShuffled(p.T, data, mohito.MaxRoundMessages, nil)
	if err != nil {
		w.cfg.Metrics.Dropped.WithLabelValues("bad_m4").Inc()
		return natsx.Drop
	}
	byVendor, _ := mohito.GroupByVendor(cmds, w.cfg.Deployment.Params.Vendors)
	// Stage B: one record message per vendor per batch, even empty, so each
	// encoder knows when it has every batch of the round.
	for v, vc := range byVendor {
		id := fmt.Sprintf("part-%d-%d-%d", p.T, batchStart, v)
		if err := natsx.Publish(ctx, w.cfg.JS, contract.WorkPart(p.T, v), id, marshalPart(w.cfg.Deployment.Params, batchStart, vc), nil); err != nil {
			return natsx.Retry
		}
	}
	w.cfg.Metrics.Commands.WithLabelValues("decrypted").Add(float64(len(cmds) - void))
	if void > 0 {
		w.cfg.Metrics.Dropped.WithLabelValues("inner_layer").Add(float64(void))
	}
	w.cfg.Metrics.StageSeconds.WithLabelValues("decrypt_batch").Observe(time.Since(start).Seconds())
	return natsx.Ack
}

// Encoder is Stage C for the vendors its partition owns (weighted
// rendezvous hash of C_v), and the response decoder for the same vendors.
type Encoder struct {
	cfg     WorkerConfig
	vendors []int
	objects jetstream.ObjectStore
	claims  jetstream.KeyValue
	id      string
	mu      sync.Mutex
	rounds  map[uint64]*encRound
	blobs   *natsx.BlobAssembler
}

type encRound struct {
	plan     *plan
	planMsgs []jetstream.Msg
	vendors  map[int]*encVendor
	first    time.Time
}

type encVendor struct {
	batches map[int][]mohito.ShuffledCommand
	msgs    []jetstream.Msg
	sealed  bool
}

// NewEncoder returns encoder partition cfg.Partition.
func NewEncoder(ctx context.Context, cfg WorkerConfig) (*Encoder, error) {
	os, err := natsx.EnsureObjectStore(ctx, cfg.JS, contract.BucketOKVS, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	claims, err := natsx.EnsureKV(ctx, cfg.JS, contract.BucketOKVSClaims, claimTTL)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Encoder{cfg: cfg, vendors: cfg.Deployment.VendorsOf(cfg.Partition), objects: os, claims: claims,
		id: fmt.Sprintf("%s-%x", contract.EncoderConsumer(cfg.Partition, cfg.Deployment.Encoders), id), rounds: map[uint64]*encRound{}, blobs: natsx.NewBlobAssembler()}, nil
}

// Vendors returns the vendors this partition owns.
func (e *Encoder) Vendors() []int { return e.vendors }

// Run consumes the command records and the response tables of its vendors.
func (e *Encoder) Run(ctx context.Context) error {
	if len(e.vendors) == 0 {
		<-ctx.Done()
		return nil
	}
	filters := []string{contract.WorkPlans}
	var rfilters []string
	for _, v := range e.vendors {
		filters = append(filters, contract.WorkParts(v))
		rfilters = append(rfilters, fmt.Sprintf("%s.r.*.%s", contract.IntegratorInbox(v), contract.KindRespTable))
	}
	name := contract.EncoderConsumer(e.cfg.Partition, e.cfg.Deployment.Encoders)
	done := make(chan struct{})
	go func() {
		defer close(done)
		natsx.Consume(ctx, e.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamIntegratorIn, Durable: name + "-resp", Filters: rfilters, AckWait: e.cfg.ackWait(), Batch: 16, ReleaseOnStop: true}, e.cfg.Log, e.handleResponseTable)
	}()
	err := natsx.Consume(ctx, e.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamWork, Durable: name, Filters: filters, AckWait: e.cfg.ackWait(), Batch: 64, ReleaseOnStop: true}, e.cfg.Log, e.handleRecord)
	<-done
	return err
}

const staleAfter = 2 * time.Minute

// claimTTL bounds how long a claim of a dead encoder blocks its table: after
// it, another owner encodes the table (nothing of it was sent yet: a table
// is sent only after it is durable, and a durable table is re-sent as is).
// A live encoder renews its claim while it encodes, so a slow encode keeps it.
const claimTTL = 6 * time.Second

// errClaimed: another encoder is encoding the table; the records stay held
// and the seal is retried on their redelivery.
var errClaimed = errors.New("table claimed by another encoder")

func (e *Encoder) round(t uint64) *encRound {
	r := e.rounds[t]
	if r == nil {
		r = &encRound{vendors: map[int]*encVendor{}, first: time.Now()}
		e.rounds[t] = r
	}
	return r
}

func (e *Encoder) handleRecord(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	if md, err := m.Metadata(); err == nil && time.Since(md.Timestamp) > staleAfter {
		e.cfg.Metrics.Dropped.WithLabelValues("stale").Inc()
		return natsx.Drop
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.round(p.T)
	switch p.Kind {
	case contract.KindPlan:
		pl, err := parsePlan(m.Data())
		if err != nil || len(pl.Counts) != e.cfg.Deployment.Params.Vendors {
			return natsx.Drop
		}
		r.plan = pl
		r.planMsgs = append(r.planMsgs, m)
	case contract.KindPart:
		ev := r.vendors[p.Vendor]
		if ev == nil {
			ev = &encVendor{batches: map[int][]mohito.ShuffledCommand{}}
			r.vendors[p.Vendor] = ev
		}
		if ev.sealed {
			return natsx.Ack // a redelivery after the table went out
		}
		start, cmds, err := parsePart(e.cfg.Deployment.Params, p.Vendor, m.Data())
		if err != nil {
			return natsx.Drop
		}
		ev.batches[start] = cmds
		ev.msgs = append(ev.msgs, m)
	default:
		return natsx.Drop
	}
	e.trySeal(ctx, p.T, r)
	return natsx.Hold
}

// trySeal encodes every owned vendor's table once all its batches are in.
// Called with e.mu held.
func (e *Encoder) trySeal(ctx context.Context, t uint64, r *encRound) {
	if r.plan == nil {
		return
	}
	want := e.cfg.Deployment.Batches(r.plan.N)
	all := true
	for _, v := range e.vendors {
		ev := r.vendors[v]
		if ev != nil && ev.sealed {
			continue
		}
		if ev == nil || len(ev.batches) < want {
			all = false
			continue
		}
		if err := e.seal(ctx, t, v, r.plan, ev); errors.Is(err, errClaimed) {
			all = false
			continue
		} else if err != nil {
			e.cfg.Log.Warn("seal failed, will retry on redelivery", "t", t, "err", err)
			all = false
			continue
		}
		for _, m := range ev.msgs {
			_ = m.DoubleAck(ctx)
		}
		ev.msgs, ev.batches, ev.sealed = nil, nil, true
	}
	if all {
		for _, m := range r.planMsgs {
			_ = m.DoubleAck(ctx)
		}
		r.planMsgs = nil
		// Keep the sealed markers for a while so redeliveries are acked.
		for k, old := range e.rounds {
			if k+64 < t || time.Since(old.first) > staleAfter {
				delete(e.rounds, k)
			}
		}
	}
}

// seal encodes S_v, makes it and the response slots durable (Object Store,
// Redis), then streams it to the vendor. A rebuilt encoder reuses a table
// that is already durable so a vendor never sees two different tables.
func (e *Encoder) seal(ctx context.Context, t uint64, v int, pl *plan, ev *encVendor) error {
	d := &e.cfg.Deployment
	name := fmt.Sprintf("%d-%d", t, v)
	m5, err := e.objects.GetBytes(ctx, name)
	if err == nil {
		if _, serr := e.cfg.Store.Slots(ctx, t, v); serr != nil {
			m5 = nil
		}
	}
	if m5 == nil {
		// While the encoders are rescaled, partitions of the old and the new
		// count overlap and two of them may own v: only the claim holder
		// encodes, so the vendor never gets two different tables (and the
		// slots in Redis always match the table sent).
		rev, err := e.claims.Create(ctx, name, []byte(e.id))
		if errors.Is(err, jetstream.ErrKeyExists) {
			c, gerr := e.claims.Get(ctx, name)
			if gerr != nil || string(c.Value()) != e.id {
				return errClaimed
			}
			rev = c.Revision()
		} else if err != nil {
			return fmt.Errorf("claim table: %w", err)
		}
		stop := e.holdClaim(ctx, name, rev)
		defer stop()
		start := time.Now()
		var cmds []mohito.ShuffledCommand
		for _, b := range ev.batches {
			cmds = append(cmds, b...)
		}
		capacity := mohito.CommandCapacity(pl.Counts[v], d.Capacity[v])
		if len(cmds) > capacity {
			capacity = mohito.CommandCapacity(len(cmds), d.Capacity[v])
		}
		table, slots, _, err := mohito.EncodeCommandTable(d.Params, cmds, capacity, rand.Reader)
		if err != nil {
			return err
		}
		if m5, err = mohito.MarshalTable(mohito.KindCommandTable, t, uint32(v), capacity, table); err != nil {
			return err
		}
		// Counted once encoded, before the stores: a store that succeeds on the server while its
		// caller is stopped still leaves a table that was encoded here (the next owner reuses it).
		e.cfg.Metrics.StageSeconds.WithLabelValues("okvs_encode").Observe(time.Since(start).Seconds())
		if err := e.cfg.Store.PutSlots(ctx, t, v, marshalSlots(slots)); err != nil {
			return fmt.Errorf("store slots: %w", err)
		}
		if _, err := e.objects.PutBytes(ctx, name, m5); err != nil {
			return fmt.Errorf("store table: %w", err)
		}
	}
	if err := natsx.SendBlob(ctx, e.cfg.JS, contract.ToVendor(v, t, contract.KindTable), "okvs-"+name, m5); err != nil {
		return err
	}
	return nil
}

// holdClaim renews the claim on table name until the returned stop is called.
func (e *Encoder) holdClaim(ctx context.Context, name string, rev uint64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(claimTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				r, err := e.claims.Update(ctx, name, []byte(e.id), rev)
				if err != nil {
					return // lapsed or taken over: the durable table decides
				}
				rev = r
			}
		}
	}()
	return func() { cancel(); <-done }
}

// handleResponseTable decodes S_v^resp at the stored slots (R3 with G1) and
// hands r′ to the responder.
func (e *Encoder) handleResponseTable(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	blob, msgs, err := e.blobs.Add(m)
	if err != nil {
		e.cfg.Metrics.Dropped.WithLabelValues("bad_blob").Inc()
		for _, mm := range msgs {
			_ = mm.Term()
		}
		return natsx.Drop
	}
	if blob == nil {
		return natsx.Hold
	}
	settle := func(o natsx.Outcome) natsx.Outcome {
		for _, mm := range msgs {
			switch o {
			case natsx.Ack:
				_ = mm.DoubleAck(ctx)
			case natsx.Drop:
				_ = mm.Term()
			default:
				_ = mm.NakWithDelay(500 * time.Millisecond)
			}
		}
		return natsx.Hold
	}
	d := &e.cfg.Deployment
	start := time.Now()
	table, _, err := mohito.ParseResponseTable(d.Params, p.T, uint32(p.Vendor), d.Quantum, 1<<22, blob)
	if err != nil {
		e.cfg.Metrics.Dropped.WithLabelValues("bad_response_table").Inc()
		return settle(natsx.Drop)
	}
	sb, err := e.cfg.Store.Slots(ctx, p.T, p.Vendor)
	if errors.Is(err, roundstate.ErrNotFound) {
		return settle(natsx.Drop)
	} else if err != nil {
		return settle(natsx.Retry)
	}
	slots, err := parseSlots(p.Vendor, sb)
	if err != nil {
		return settle(natsx.Drop)
	}
	out := make([][]byte, len(slots))
	if err := mohito.DecodeResponseLayer(d.Params, table, slots, out); err != nil {
		return settle(natsx.Drop)
	}
	if err := natsx.SendBlob(ctx, e.cfg.JS, contract.WorkLayer(p.T, p.Vendor), fmt.Sprintf("rl-%d-%d", p.T, p.Vendor), marshalLayer(slots, out)); err != nil {
		return settle(natsx.Retry)
	}
	e.cfg.Metrics.StageSeconds.WithLabelValues("response_decode").Observe(time.Since(start).Seconds())
	return settle(natsx.Ack)
}

// Responder assembles r′ from every vendor's decoder into M9 for V*, and
// routes V*'s M10 to the user mailboxes (spec R3–R5, O13).
type Responder struct {
	cfg    WorkerConfig
	mu     sync.Mutex
	rounds map[uint64]*respRound
	blobs  *natsx.BlobAssembler
	OnDone func(t uint64, k int) // called once every response of round t is in a mailbox
}

type respRound struct {
	plan   *plan
	msgs   []jetstream.Msg
	layers map[int][]byte
	sent   bool
	routed int
	first  time.Time
}

// NewResponder returns the responder.
func NewResponder(cfg WorkerConfig) *Responder {
	return &Responder{cfg: cfg, rounds: map[uint64]*respRound{}, blobs: natsx.NewBlobAssembler()}
}

// Run consumes plans, r′ blobs and M10.
func (r *Responder) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		natsx.Consume(ctx, r.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamIntegratorIn, Durable: contract.ConsumerRouter, Filters: []string{contract.FromVendors(contract.KindRespOut)}, AckWait: r.cfg.ackWait()}, r.cfg.Log, r.route)
	}()
	err := natsx.Consume(ctx, r.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamWork, Durable: contract.ConsumerResponder, Filters: []string{contract.WorkPlans, contract.WorkLayers}, AckWait: r.cfg.ackWait(), ReleaseOnStop: true}, r.cfg.Log, r.collect)
	<-done
	return err
}

func (r *Responder) round(t uint64) *respRound {
	rr := r.rounds[t]
	if rr == nil {
		rr = &respRound{layers: map[int][]byte{}, first: time.Now()}
		r.rounds[t] = rr
		for k, old := range r.rounds {
			if time.Since(old.first) > staleAfter {
				delete(r.rounds, k)
			}
		}
	}
	return rr
}

func (r *Responder) collect(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	if md, err := m.Metadata(); err == nil && time.Since(md.Timestamp) > staleAfter {
		return natsx.Drop
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.round(p.T)
	if rr.sent {
		return natsx.Ack
	}
	switch p.Kind {
	case contract.KindPlan:
		pl, err := parsePlan(m.Data())
		if err != nil {
			return natsx.Drop
		}
		rr.plan = pl
		rr.msgs = append(rr.msgs, m)
	case contract.KindLayerShare:
		blob, msgs, err := r.blobs.Add(m)
		if err != nil {
			for _, mm := range msgs {
				_ = mm.Term()
			}
			return natsx.Hold
		}
		if blob == nil {
			return natsx.Hold
		}
		rr.layers[p.Vendor] = blob
		rr.msgs = append(rr.msgs, msgs...)
	default:
		return natsx.Drop
	}
	if rr.plan == nil || len(rr.layers) < r.cfg.Deployment.Params.Vendors {
		return natsx.Hold
	}
	if err := r.sendLayer(ctx, rr); err != nil {
		r.cfg.Log.Warn("M9 not sent, will retry", "t", p.T, "err", err)
		for _, mm := range rr.msgs {
			_ = mm.NakWithDelay(500 * time.Millisecond)
		}
		rr.msgs = nil
		rr.layers = map[int][]byte{}
		return natsx.Hold
	}
	for _, mm := range rr.msgs {
		_ = mm.DoubleAck(ctx)
	}
	rr.msgs, rr.layers, rr.sent = nil, nil, true
	return natsx.Hold
}

func (r *Responder) sendLayer(ctx context.Context, rr *respRound) error {
	d := &r.cfg.Deployment
	pl := rr.plan
	layer := make([][]byte, pl.N)
	for _, b := range rr.layers {
		if err := parseLayer(d.Params, b, layer); err != nil {
			return err
		}
	}
	for i := range layer {
		if layer[i] == nil {
			// A position whose inner layer did not open: random r′ (G1).
			v, err := mohito.VoidResponseLayer(d.Params, nil)
			if err != nil {
				return err
			}
			layer[i] = v
		}
	}
	for s := 0; s < pl.N; s += d.OutBatch {
		e := min(s+d.OutBatch, pl.N)
		m9, err := mohito.MarshalResponseLayer(d.Params, pl.T, s, layer[s:e])
		if err != nil {
			return err
		}
		if err := natsx.Publish(ctx, r.cfg.JS, contract.ToVendor(int(pl.Shuffler), pl.T, contract.KindRespLayer), fmt.Sprintf("m9-%d-%d", pl.T, s), m9, nil); err != nil {
			return err
		}
	}
	return nil
}

// route writes each r_i into its user's mailbox; the user is looked up by
// index in Redis, never derived from anything V* sent.
func (r *Responder) route(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	d := &r.cfg.Deployment
	start, vals, err := mohito.ParseResponseOut(d.Params, p.T, m.Data(), mohito.MaxRoundMessages)
	if err != nil {
		r.cfg.Metrics.Dropped.WithLabelValues("bad_m10").Inc()
		return natsx.Drop
	}
	for i, v := range vals {
		idx := uint32(start + i)
		user, err := r.cfg.Store.User(ctx, p.T, idx)
		if errors.Is(err, roundstate.ErrNotFound) {
			continue
		} else if err != nil {
			return natsx.Retry
		}
		m11, err := mohito.MarshalUserResponse(d.Params, p.T, idx, v)
		if err != nil {
			return natsx.Drop
		}
		if err := r.cfg.Store.PutResponse(ctx, user, p.T, idx, m11); err != nil {
			return natsx.Retry
		}
	}
	r.cfg.Metrics.Commands.WithLabelValues("responses").Add(float64(len(vals)))
	r.mu.Lock()
	rr := r.round(p.T)
	rr.routed += len(vals)
	k := -1
	if rr.plan != nil {
		k = rr.plan.K
	}
	fire := k >= 0 && rr.routed == k
	r.mu.Unlock()
	if fire {
		_ = r.cfg.Store.SetStatus(ctx, p.T, roundstate.StatusDone)
		r.cfg.Metrics.Rounds.WithLabelValues("done").Inc()
		if r.OnDone != nil {
			r.OnDone(p.T, k)
		}
	}
	return natsx.Ack
}
