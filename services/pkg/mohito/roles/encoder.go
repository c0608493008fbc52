package roles

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

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
	// retry is set while a timer will call trySeal again (a table claimed by another encoder).
	retry bool
}

type encVendor struct {
	batches map[int][]mohito.ShuffledCommand
	msgs    []jetstream.Msg
	sealed  bool
}

// NewEncoder returns encoder partition cfg.Partition.
func NewEncoder(ctx context.Context, cfg WorkerConfig) (*Encoder, error) {
	os, err := natsx.EnsureMemoryObjectStore(ctx, cfg.JS, contract.BucketOKVS, cfg.Deployment.TableTTL())
	if err != nil {
		return nil, err
	}
	claims, err := natsx.EnsureMemoryKV(ctx, cfg.JS, contract.BucketOKVSClaims, claimTTL)
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
	// One replica of a partition consumes at a time: a table needs every batch of its vendor's
	// round, and a durable consumer shared by two replicas splits them. A stopped leader releases
	// what it held and the lease, so the standby takes over at once (within EncoderLeaseTTL after
	// a crash).
	lease, err := natsx.NewLease(ctx, e.cfg.JS, contract.BucketEncoderLeases, name, e.id, EncoderLeaseTTL, e.cfg.Log)
	if err != nil {
		return fmt.Errorf("encoder lease: %w", err)
	}
	lease.Lead(ctx, func(ctx context.Context, _ <-chan struct{}) error {
		e.mu.Lock()
		e.rounds = map[uint64]*encRound{} // what an earlier leadership held was released
		e.mu.Unlock()
		return natsx.ConsumeAll(ctx, e.cfg.JS, e.cfg.Log,
			natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.StreamIntegratorIn, Durable: name + "-resp", Filters: rfilters, AckWait: e.cfg.ackWait(), Batch: 16, ReleaseOnStop: true}, Handler: e.handleResponseTable},
			natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.StreamWork, Durable: name, Filters: filters, AckWait: e.cfg.ackWait(), Batch: 64, ReleaseOnStop: true, Pending: e.cfg.Metrics.pending(name)}, Handler: e.handleRecord})
	}, nil)
	return nil
}

// EncoderLeaseTTL is the lease of an encoder partition's active replica.
const EncoderLeaseTTL = 3 * time.Second

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
			e.cfg.Log.Debug("table claimed by another encoder; retrying", "t", t, "vendor", v)
			e.retrySeal(ctx, t, r)
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

// retrySeal calls trySeal for round t again after claimRetry, once per pending retry. A claim
// left by an encoder that stopped (a rescale's or a rolling update's previous owner whose
// release did not reach the server) lapses after claimTTL; waiting for the records' redelivery
// instead added an ack wait on top, and a round whose table came that late could time out.
// Called with e.mu held.
func (e *Encoder) retrySeal(ctx context.Context, t uint64, r *encRound) {
	if r.retry {
		return
	}
	r.retry = true
	time.AfterFunc(claimRetry, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		r.retry = false
		if ctx.Err() != nil || e.rounds[t] != r {
			return // leadership ended (its rounds were released) or the round was forgotten
		}
		e.trySeal(ctx, t, r)
	})
}

// claimRetry is how often a claimed table is looked at again.
const claimRetry = claimTTL / 3

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
	reused := m5 != nil
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
		durable := false
		defer func() {
			last := stop()
			if !durable {
				// Not encoded (stopped, or a store failed): release the claim so the
				// next owner encodes at once instead of after claimTTL and an ack wait.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				if err := e.claims.Delete(dctx, name, jetstream.LastRevision(last)); err != nil {
					// A renewal whose answer was lost to the stop moved the revision on: the
					// claim is still ours if it holds our id.
					if c, gerr := e.claims.Get(dctx, name); gerr == nil && string(c.Value()) == e.id {
						_ = e.claims.Delete(dctx, name, jetstream.LastRevision(c.Revision()))
					}
				}
				cancel()
			}
		}()
		start := time.Now()
		// The vendor's batches in shuffled-position order (a map's order is random): which
		// of two commands with one z is kept (O6) is then the same at every encoder and on
		// every redo (spec §9 #7).
		var cmds []mohito.ShuffledCommand
		for _, start := range slices.Sorted(maps.Keys(ev.batches)) {
			cmds = append(cmds, ev.batches[start]...)
		}
		capacity := mohito.CommandCapacity(pl.Counts[v], d.Capacity[v])
		if len(cmds) > capacity {
			capacity = mohito.CommandCapacity(len(cmds), d.Capacity[v])
		}
		table, slots, dups, err := mohito.EncodeCommandTable(d.Params, cmds, capacity, rand.Reader)
		if err != nil {
			return err
		}
		if dups > 0 {
			// Two commands for one device slot in one round (spec O6): the first is kept.
			e.cfg.Metrics.Rejected.WithLabelValues("duplicate_z").Add(float64(dups))
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
		// Durable: a later owner reuses it. The claim stays until claimTTL, so an overlapping
		// partition that looked before the put cannot encode a second table.
		durable = true
	}
	if err := natsx.SendBlob(ctx, e.cfg.JS, contract.ToVendor(v, t, contract.KindTable), "okvs-"+name, m5); err != nil {
		return err
	}
	e.cfg.Log.Debug("command table sent", "t", t, "vendor", v, "bytes", len(m5), "reused", reused)
	return nil
}

// holdClaim renews the claim on table name until the returned stop is called; stop returns the
// claim's last revision.
func (e *Encoder) holdClaim(ctx context.Context, name string, rev uint64) (stop func() uint64) {
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
	return func() uint64 { cancel(); <-done; return rev }
}

// handleResponseTable decodes S_v^resp at the stored slots (R3 with G1) and
// hands r′ to the responder.
func (e *Encoder) handleResponseTable(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	blob, msgs, o := e.blobs.Assemble(m)
	if blob == nil {
		if o == natsx.Drop {
			e.cfg.Metrics.Dropped.WithLabelValues("bad_blob").Inc()
		}
		return o
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
		e.cfg.Log.Warn("response table without stored slots dropped", "t", p.T, "vendor", p.Vendor)
		e.cfg.Metrics.Dropped.WithLabelValues("no_slots").Inc()
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
	if err := natsx.SendBlob(ctx, e.cfg.JS, contract.WorkLayer(p.T, p.Vendor), fmt.Sprintf("rl-%d-%d", p.T, p.Vendor), marshalLayer(d.Params, slots, out)); err != nil {
		return settle(natsx.Retry)
	}
	e.cfg.Metrics.StageSeconds.WithLabelValues("response_decode").Observe(time.Since(start).Seconds())
	e.cfg.Log.Debug("response layer sent", "t", p.T, "vendor", p.Vendor)
	return settle(natsx.Ack)
}
