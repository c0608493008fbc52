package roles

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// The gateway streams admitted M2s to V* (spec §3.5, C2; docs/services.md, "Durability per
// round"). A command is acknowledged once Admit has put its M1 in Redis: from there the
// coordinator re-forwards at close every index not marked forwarded, and the shuffler accepts
// an index once (a repeat is mohito.ErrIndex). So Submit does not wait for V*: it hands M2 to
// the forwarder, which publishes it at once, and marks what V*'s stream acknowledged forwarded
// in one Redis call per round and pass. A gateway that dies with an M2 unpublished or unmarked
// costs the coordinator a re-forward of that index, never a lost or a duplicated command.
//
// Every M2 is its own JetStream message, under the id the coordinator's re-forward uses
// (fwdID), so V*'s wire shape in a round is k messages of Params.ForwardSize() bytes: a
// function of k, which V* learns from M3 anyway, and of the public parameters. Batches formed
// by time (publish 20 ms after the first M2, or at 256) made the shape depend on when and at
// which gateway replica the round's submissions arrived — under load the same round reached
// V* as 2 × 2 M2s in one run and 2 + 1 + 1 in another (TestVendorWireTranscriptIndependentOfRecipients,
// TestForwarderWireShapeIndependentOfTiming). Fixed-size chunks cannot fix that at a gateway:
// a round's indices are spread over the replicas, and only the close knows the last chunk.
// What the batches saved — JetStream round trips and Redis calls per command — is kept by
// publishing asynchronously (up to fwdInFlight acks awaited together) and by marking a
// pass's M2s in one call; the per-message cost in V*'s stream stays.
const fwdInFlight = 256

// fwdEntry is one queued M2: slab[off:end] of its pass.
type fwdEntry struct {
	t        uint64
	shuffler int
	idx      uint32
	off, end int
}

// forwarder publishes a gateway's admitted M2s to V*, one message each.
type forwarder struct {
	js      jetstream.JetStream
	store   roundstate.Store
	log     *slog.Logger
	metrics *Metrics

	mu    sync.Mutex
	queue []fwdEntry
	slab  []byte // the queued M2s back to back (no 1 KB allocation per command)
	spare []byte // the slab of the pass before, reused
	kick  chan struct{}
	done  chan struct{}

	// failed counts the M2s left to the coordinator's re-forward (publish failed).
	failed atomic.Int64
}

func newForwarder(js jetstream.JetStream, store roundstate.Store, log *slog.Logger, m *Metrics) *forwarder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &forwarder{js: js, store: store, log: log, metrics: m, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// add queues M2 of index idx of round t for V* (vendor shuffler), built in place from the
// outer layer.
func (f *forwarder) add(p mohito.Params, t uint64, shuffler int, idx uint32, outer []byte) {
	f.mu.Lock()
	off := len(f.slab)
	slab, err := mohito.AppendForward(f.slab, p, t, idx, outer)
	if err != nil {
		f.mu.Unlock()
		return
	}
	f.slab = slab
	f.queue = append(f.queue, fwdEntry{t: t, shuffler: shuffler, idx: idx, off: off, end: len(slab)})
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// take returns the M2s queued so far and their slab, and starts a new queue.
func (f *forwarder) take() ([]fwdEntry, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	es, slab := f.queue, f.slab
	f.queue, f.slab, f.spare = nil, f.spare, nil
	return es, slab
}

// fwdKeepSlab bounds the slab kept for the next pass (bytes): a burst's larger one is freed.
const fwdKeepSlab = 1 << 20

// giveBack keeps a published pass's slab for reuse.
func (f *forwarder) giveBack(slab []byte) {
	if cap(slab) > fwdKeepSlab {
		return
	}
	f.mu.Lock()
	f.spare = slab[:0]
	f.mu.Unlock()
}

// run publishes the M2s as they are queued until ctx ends, then publishes what is left.
func (f *forwarder) run(ctx context.Context) {
	defer close(f.done)
	pass := func(ctx context.Context) bool {
		es, slab := f.take()
		if len(es) == 0 {
			return false
		}
		f.publish(ctx, es, slab)
		f.giveBack(slab)
		return true
	}
	// A pass in progress is not cut short by ctx (its publishes have their own deadlines): an
	// M2 taken from the queue is published or left unmarked, never dropped midway.
	live := context.WithoutCancel(ctx)
	for {
		for ctx.Err() == nil && pass(live) {
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(live, 4*time.Second)
			for pass(fctx) {
			}
			cancel()
			return
		case <-f.kick:
		}
	}
}

// fwdWait bounds the wait for a window's acknowledgements, then its retries, then its marks.
const fwdWait = 2 * time.Second

// publish sends a pass's M2s to V*, each as its own message, fwdInFlight at a time awaiting
// their acknowledgements together, and marks each window's acknowledged M2s forwarded (one
// call per round).
func (f *forwarder) publish(ctx context.Context, es []fwdEntry, slab []byte) {
	acks := make([]jetstream.PubAckFuture, 0, min(len(es), fwdInFlight))
	for start := 0; start < len(es); start += fwdInFlight {
		win := es[start:min(start+fwdInFlight, len(es))]
		acks = acks[:0]
		for _, e := range win {
			// No retry inside the client: it would re-send the message's bytes from the slab
			// after this pass gave it back; failures are retried below, within the pass.
			a, err := f.js.PublishMsgAsync(f.msg(e, slab), jetstream.WithMsgID(fwdID(e.t, e.idx)), jetstream.WithRetryAttempts(0))
			if err != nil {
				a = nil
			}
			acks = append(acks, a)
		}
		f.settle(ctx, win, acks, slab)
	}
}

// settle waits for a window's acknowledgements, publishes again with natsx.Publish's retries
// each M2 whose asynchronous publish failed, and marks the ones V*'s stream holds forwarded.
// One that still fails stays unmarked: the coordinator re-forwards it at close.
func (f *forwarder) settle(ctx context.Context, win []fwdEntry, acks []jetstream.PubAckFuture, slab []byte) {
	wctx, cancel := context.WithTimeout(ctx, fwdWait)
	defer cancel()
	var retry []fwdEntry
	marks := map[uint64][]uint32{}
	for i, e := range win {
		if acked(wctx, acks[i]) {
			marks[e.t] = append(marks[e.t], e.idx)
		} else {
			retry = append(retry, e)
		}
	}
	if len(retry) > 0 {
		rctx, cancel := context.WithTimeout(ctx, fwdWait) // the retries share one deadline
		failed, lastErr := 0, error(nil)
		for _, e := range retry {
			m := f.msg(e, slab)
			if err := natsx.Publish(rctx, f.js, m.Subject, fwdID(e.t, e.idx), m.Data, nil); err != nil {
				failed, lastErr = failed+1, err
				continue
			}
			marks[e.t] = append(marks[e.t], e.idx)
		}
		cancel()
		if failed > 0 {
			f.failed.Add(int64(failed))
			f.log.Warn("M2s not published: the coordinator re-forwards them at close", "n", failed, "err", lastErr)
		}
	}
	mctx, cancel := context.WithTimeout(ctx, fwdWait)
	defer cancel()
	for t, is := range marks {
		if err := f.store.MarkForwarded(mctx, t, is...); err != nil {
			f.log.Warn("M2s not marked forwarded: the coordinator re-forwards them at close", "t", t, "n", len(is), "err", err)
		}
	}
}

// msg is entry e's M2 message to V*.
func (f *forwarder) msg(e fwdEntry, slab []byte) *nats.Msg {
	return &nats.Msg{Subject: contract.ToVendor(e.shuffler, e.t, contract.KindForward), Data: slab[e.off:e.end:e.end]}
}

// acked waits for a's acknowledgement; false if the publish failed or ctx ended first.
func acked(ctx context.Context, a jetstream.PubAckFuture) bool {
	if a == nil {
		return false
	}
	select {
	case <-a.Ok():
		return true
	case <-a.Err():
		return false
	case <-ctx.Done():
		return false
	}
}
