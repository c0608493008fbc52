package roles

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// The gateway streams admitted M2s to V* in batches (docs/services.md, "Durability per
// round"). A command is acknowledged once Admit has put its M1 in Redis: from there the
// coordinator re-forwards at close every index not marked forwarded, and the shuffler accepts
// an index once (a repeat is mohito.ErrIndex). So Submit does not wait for V*: it hands M2 to
// the forwarder, which publishes a round's M2s — fixed-size envelopes, concatenated — as one
// JetStream message once fwdLinger has passed since the first of them, fwdMax are waiting, or
// a newer round has opened (the coordinator closes a round once its successor is open), then
// marks the batch forwarded in one Redis call. A gateway that dies with a batch unpublished
// or unmarked costs the coordinator a re-forward of those indices, never a lost or a
// duplicated command.
const (
	fwdLinger = 20 * time.Millisecond
	fwdMax    = 256
)

type fwdKey struct {
	t        uint64
	shuffler int
}

type fwdBatch struct {
	first time.Time
	idx   []uint32
	data  []byte // len(idx) M2s back to back
}

// forwarder batches a gateway's admitted M2s per round.
type forwarder struct {
	js      jetstream.JetStream
	store   roundstate.Store
	log     *slog.Logger
	metrics *Metrics

	mu     sync.Mutex
	pend   map[fwdKey]*fwdBatch
	newest uint64 // the newest round with a batch: older rounds' batches go at once
	kick   chan struct{}
	done   chan struct{}
}

func newForwarder(js jetstream.JetStream, store roundstate.Store, log *slog.Logger, m *Metrics) *forwarder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &forwarder{js: js, store: store, log: log, metrics: m, pend: map[fwdKey]*fwdBatch{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// fwdInitial is a new batch's room, in M2s: a batch grows from it by doubling, and most
// batches at a few hundred commands/s fit.
const fwdInitial = 16

// add queues M2 of index idx of round t for V* (vendor shuffler), built in place from the
// outer layer (no M2 of its own per command).
func (f *forwarder) add(p mohito.Params, t uint64, shuffler int, idx uint32, outer []byte) {
	k := fwdKey{t, shuffler}
	f.mu.Lock()
	b := f.pend[k]
	fresh := b == nil
	if fresh {
		b = &fwdBatch{first: time.Now(), idx: make([]uint32, 0, fwdInitial), data: make([]byte, 0, fwdInitial*p.ForwardSize())}
	}
	data, err := mohito.AppendForward(b.data, p, t, idx, outer)
	if err != nil {
		f.mu.Unlock()
		return
	}
	if fresh {
		f.pend[k] = b
	}
	b.idx = append(b.idx, idx)
	b.data = data
	kick := fresh || len(b.idx) >= fwdMax || t > f.newest
	f.newest = max(f.newest, t)
	f.mu.Unlock()
	if kick {
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
}

// due takes the batches to publish now (all of them when all is set) and returns when the
// next one falls due (zero: none waiting).
func (f *forwarder) due(now time.Time, all bool) (map[fwdKey]*fwdBatch, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out map[fwdKey]*fwdBatch
	var next time.Time
	for k, b := range f.pend {
		at := b.first.Add(fwdLinger)
		if all || k.t < f.newest || len(b.idx) >= fwdMax || !now.Before(at) {
			if out == nil {
				out = map[fwdKey]*fwdBatch{}
			}
			out[k] = b
			delete(f.pend, k)
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return out, next
}

// run publishes batches as they fall due until ctx ends, then publishes what is left.
func (f *forwarder) run(ctx context.Context) {
	defer close(f.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batches, next := f.due(time.Now(), false)
		for k, b := range batches {
			f.publish(ctx, k, b)
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			last, _ := f.due(time.Now(), true)
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			for k, b := range last {
				f.publish(fctx, k, b)
			}
			cancel()
			return
		case <-f.kick:
		case <-timer.C:
		}
	}
}

// publish sends one batch to V* and marks its indices forwarded. A failure leaves them
// unmarked: the coordinator re-forwards them at close.
func (f *forwarder) publish(ctx context.Context, k fwdKey, b *fwdBatch) {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// The id names the batch's first index and size: indices are unique in a round across
	// replicas (Redis assigns them), so a retried publish is stored once.
	id := fmt.Sprintf("fwdb-%d-%d-%d", k.t, b.idx[0], len(b.idx))
	if err := natsx.Publish(pctx, f.js, contract.ToVendor(k.shuffler, k.t, contract.KindForward), id, b.data, nil); err != nil {
		f.log.Warn("forward batch not published: the coordinator re-forwards it at close", "t", k.t, "n", len(b.idx), "err", err)
		return
	}
	if err := f.store.MarkForwarded(pctx, k.t, b.idx...); err != nil {
		f.log.Warn("forward batch not marked: the coordinator re-forwards it at close", "t", k.t, "n", len(b.idx), "err", err)
	}
}
