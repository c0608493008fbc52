package roles

import (
	"context"
	"encoding/binary"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// Window checks: the KKRT consistency check (D16b) of a publisher's labels while the
// collection window is still open, so that at the tick only what was not checked yet is.
//
// A label's consistency does not depend on the execution: the garbler derives both labels
// of bit j of value v of publisher P's round k from P's round seed alone (spec §8.2), so
// "the label the broker holds for (P, k, v, j) is one of the two" is decided once the round
// has arrived. As each publish is stored, its labels are queued; a loop checks what is
// queued in one KKRT batch per arrival burst (over the replica's KKRT session, in the name
// of a faithful KKRT pipeline that reads the value) and keeps, for every value found
// consistent, a copy of its 32 labels. At the tick an execution's slot counts as checked
// only if the labels it is about to evaluate are byte for byte the copy that was checked;
// every other valid slot — not checked yet, checked and found inconsistent or erased, or
// whose stored labels differ from the checked copy — is checked at the tick as before, and
// an inconsistent one is nullified and counted there. So what is evaluated is exactly what
// was checked, and inconsistent labels are still counted once, by the tick, by reason.
//
// In a window check the slot numbers index the check's own inputs (0..n-1 with n at most
// the function's slot count), not the execution's slots: the garbler derives labels from
// the (publisher, round, value) each input names. The garbler learns when each round arrived
// (to within a burst), which it would otherwise learn at the tick only; the broker's copies
// are labels it holds anyway, kept in memory until the round is released or expires.

// windowCheckMax bounds the values whose checked labels a replica keeps (512 B each): a
// day of 9 × 288 values is 2,592. Beyond it, values are left to the tick's check.
const windowCheckMax = 1 << 16

// windowCheckCoalesce is how long the loop waits after the first arrival of a burst before
// checking it, so a burst of publishers goes into one KKRT batch.
const windowCheckCoalesce = 20 * time.Millisecond

// windowKey names one value of one round of one publisher.
type windowKey struct {
	pub   string
	round uint64
	value int
}

// windowArrival is one stored publish, waiting for its window check.
type windowArrival struct {
	pub    string
	round  uint64
	labels []byte // the publish's label payload, every value
	at     time.Time
}

// windowChecked is a value found consistent in the window: the labels checked.
type windowChecked struct {
	labels [pps.ValueBits]pps.Label
	at     time.Time
}

// windowChecks is a replica's queue of arrivals to check and its table of checked values.
type windowChecks struct {
	mu       sync.Mutex
	queue    []windowArrival
	inflight int
	ok       map[windowKey]*windowChecked
	wake     chan struct{}
}

func newWindowChecks() *windowChecks {
	return &windowChecks{ok: map[windowKey]*windowChecked{}, wake: make(chan struct{}, 1)}
}

// enqueue queues a stored publish for its window check.
func (w *windowChecks) enqueue(a windowArrival) {
	w.mu.Lock()
	if len(w.queue) < windowCheckMax {
		w.queue = append(w.queue, a)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take removes and returns what is queued.
func (w *windowChecks) take() []windowArrival {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	w.inflight += len(q)
	return q
}

func (w *windowChecks) done(n int) {
	w.mu.Lock()
	w.inflight -= n
	w.mu.Unlock()
}

// pending is the number of arrivals queued or being checked.
func (w *windowChecks) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) + w.inflight
}

// checked reports whether the value key was found consistent in the window with exactly
// these labels.
func (w *windowChecks) checked(k windowKey, labels []pps.Label) bool {
	w.mu.Lock()
	c, ok := w.ok[k]
	w.mu.Unlock()
	if !ok || len(labels) != pps.ValueBits {
		return false
	}
	// Constant time over the 512 bytes, a word at a time (one crypto/subtle call per label
	// cost 7 ms per Table 2 tick).
	var diff uint64
	for j := range labels {
		a, b := &labels[j], &c.labels[j]
		diff |= binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(b[:8])
		diff |= binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
	}
	return diff == 0 // only the result is revealed, which the caller acts on anyway
}

func (w *windowChecks) add(k windowKey, labels []pps.Label, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ok) >= windowCheckMax {
		return
	}
	c := &windowChecked{at: at}
	copy(c.labels[:], labels)
	w.ok[k] = c
}

// forget drops the checked values of pub's rounds below before (released, D8), and every
// value older than retention.
func (w *windowChecks) forget(pub string, before uint64, now time.Time, retention time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.ok {
		if (k.pub == pub && k.round < before) || now.Sub(c.at) > retention {
			clear(c.labels[:])
			delete(w.ok, k)
		}
	}
}

// reset drops everything (a new set of pipelines: a publisher's values may be other topics).
func (w *windowChecks) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, c := range w.ok {
		clear(c.labels[:])
		delete(w.ok, k)
	}
	for i := range w.queue {
		clear(w.queue[i].labels)
	}
	w.queue = nil
}

// WindowChecksPending is the number of stored publishes whose window check has not finished
// (for tests and benchmarks: a tick after it is 0 checks only what the window left).
func (b *Broker) WindowChecksPending() int { return b.win.pending() }

// windowCheckFns maps each (publisher, value index) to the pipeline its window checks run in
// the name of: the first registered faithful pipeline checking with KKRT, whose seed TTL
// covers its window and schedule, that reads it.
func (b *Broker) windowCheckFns(set *brokerSet) map[windowKey]*brokerFunction {
	out := map[windowKey]*brokerFunction{}
	for _, f := range set.fns {
		if f.hardened {
			continue
		}
		if c := f.p.Check; c == contract.CheckOPRF || (c == "" && b.opt.Check != contract.CheckKKRT) {
			continue
		}
		if st, _ := f.state(); st != FunctionRegistered {
			continue
		}
		// A window check makes the garbler derive and retain the round's seed when it
		// arrives, not at the tick: a seed TTL shorter than window + schedule would then
		// erase early rounds before their tick. Such pipelines are checked at the tick only
		// (zero: the garbler's default, 26 h).
		if ttl := f.p.SeedTTL.Duration; ttl != 0 && ttl < f.p.Window.Duration+f.p.Schedule.Duration {
			continue
		}
		for s, pub := range f.slotPub {
			k := windowKey{pub: pub, value: f.slotValue[s]}
			if _, ok := out[k]; !ok {
				out[k] = f
			}
		}
	}
	return out
}

// runWindowChecks checks queued arrivals, one burst at a time, until ctx ends.
func (b *Broker) runWindowChecks(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-b.win.wake:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(windowCheckCoalesce):
		}
		q := b.win.take()
		if len(q) == 0 {
			continue
		}
		b.windowCheck(ctx, q)
		for i := range q {
			clear(q[i].labels)
		}
		b.win.done(len(q))
	}
}

// windowEntry is one value of a window check.
type windowEntry struct {
	key    windowKey
	labels []pps.Label
}

// windowCheck checks a burst of arrivals: per pipeline, in KKRT batches of at most the
// function's slot count. A failed batch is only logged; its values are checked at the tick.
func (b *Broker) windowCheck(ctx context.Context, q []windowArrival) {
	set := b.current()
	fns := b.windowCheckFns(set)
	byFn := map[*brokerFunction][]windowEntry{}
	var order []*brokerFunction
	at := map[windowKey]time.Time{}
	for _, a := range q {
		nv := len(set.topics[a.pub])
		for v := range nv {
			f := fns[windowKey{pub: a.pub, value: v}]
			if f == nil {
				continue
			}
			ls, err := splitLabels(a.labels, nv, v)
			if err != nil {
				continue
			}
			k := windowKey{pub: a.pub, round: a.round, value: v}
			if _, dup := at[k]; dup {
				continue
			}
			at[k] = a.at
			if _, ok := byFn[f]; !ok {
				order = append(order, f)
			}
			byFn[f] = append(byFn[f], windowEntry{key: k, labels: ls})
		}
	}
	for _, f := range order {
		es := byFn[f]
		defer func() {
			for _, e := range es {
				clear(e.labels)
			}
		}()
		per := min(len(f.f.Layout.Slots), pps.MaxKKRTPositions/pps.ValueBits)
		for len(es) > 0 && ctx.Err() == nil {
			n := min(per, len(es))
			b.windowBatch(ctx, f, es[:n], at)
			es = es[n:]
		}
	}
}

func (b *Broker) windowBatch(ctx context.Context, f *brokerFunction, es []windowEntry, at map[windowKey]time.Time) {
	var exec pps.ExecID
	if _, err := io.ReadFull(b.rand, exec[:]); err != nil {
		b.log.Warn("window check", "pipeline", f.p.Name, "err", err)
		return
	}
	slots := make([]*ppsv1.SlotInput, len(es))
	recv := make([]pps.ReceivedLabel, 0, len(es)*pps.ValueBits)
	for i, e := range es {
		slots[i] = &ppsv1.SlotInput{Slot: uint32(i), PubId: e.key.pub, Round: e.key.round, Value: uint32(e.key.value)}
		for j, l := range e.labels {
			recv = append(recv, pps.ReceivedLabel{Pos: pps.PositionOf(i, j), Label: l})
		}
	}
	defer clear(recv)
	t0 := time.Now()
	bad, erased, err := b.kkrtCheck(ctx, f.f.ID, slots, exec, recv)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("window check failed, its values are checked at the tick", "pipeline", f.p.Name, "values", len(es), "err", err)
		}
		return
	}
	b.m.Latency.WithLabelValues(f.p.Name, "window_check").Observe(time.Since(t0).Seconds())
	b.m.CheckPositions.WithLabelValues(f.p.Name, "window").Add(float64(len(recv)))
	skip := make([]bool, len(es))
	for _, s := range slices.Concat(erased, pps.BadSlots(bad)) {
		if int(s) < len(skip) {
			skip[s] = true
		}
	}
	for i, e := range es {
		if !skip[i] {
			b.win.add(e.key, e.labels, at[e.key])
		}
	}
}
