package roles

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
)

// Responses and rounds are pushed to users, not polled (docs/services.md, "Gateway"):
//
//   - Fetch with wait_ms > 0 is a long-poll. The gateway parks the call until the ticket's
//     round is released — every response of the round is in the mailboxes (status done) or
//     the round was aborted — and answers it then, from the mailbox. A response is released
//     per round, never per device or per M10 batch: a call for round t returns at the same
//     moment as every other call for round t.
//   - Rounds is a server-streaming call that sends each round's M0 as it becomes current, so
//     a client does not ask RoundInfo before every command.
//
// Both are bounded by MaxWait, below the edge's route timeout (charts/obscura edge.upstream
// .timeout, 30 s): a held call never looks like a stuck upstream to Envoy, and any replica can
// answer any user's next call — replicas stay interchangeable and keep no session state.
//
// The gateway learns of a release from ReleaseSubject, a core-NATS notice the responder
// publishes after it marks a round done; every replica receives it. Core NATS is at most
// once and aborts are decided by the coordinator, so a backstop re-reads the round status of
// rounds that have parked calls every releaseBackstop: a lost notice or an abort delays an
// answer by at most that, and the cost is per pending round, not per user.

// MaxWait caps how long the gateway holds a Fetch or a Rounds stream.
const MaxWait = 20 * time.Second

// ReleaseSubject is the core-NATS subject (integrator account, in no stream) on which the
// responder announces that a round's responses are released: 8 bytes of t, then the status.
const ReleaseSubject = "mohito.gw.released"

// releaseBackstop is how often the gateway re-reads the status of rounds with parked calls.
const releaseBackstop = 250 * time.Millisecond

// releasedKeep is how many released rounds' statuses a gateway keeps in memory.
const releasedKeep = 256

// AnnounceRelease tells every gateway replica that round t's responses are released (status
// done or aborted). Best effort: the gateways' backstop covers a lost notice.
func AnnounceRelease(nc *nats.Conn, t uint64, status string) {
	if nc == nil {
		return
	}
	b := make([]byte, 8, 8+len(status))
	binary.BigEndian.PutUint64(b, t)
	_ = nc.Publish(ReleaseSubject, append(b, status...))
}

// released reports whether status releases a round's responses.
func released(status string) bool {
	return status == roundstate.StatusDone || status == roundstate.StatusAborted
}

// releases tracks the rounds users wait for: a channel per round with parked calls, closed
// when the round is released, and the status of recently released rounds.
type releases struct {
	store roundstate.Store

	mu      sync.Mutex
	waiting map[uint64]*roundWait
	done    map[uint64]string
	maxT    uint64
}

type roundWait struct {
	ch chan struct{}
	n  int
}

func newReleases(store roundstate.Store) *releases {
	return &releases{store: store, waiting: map[uint64]*roundWait{}, done: map[uint64]string{}}
}

// status returns round t's status: from memory once released, else from the store ("" when
// the store has none).
func (r *releases) status(ctx context.Context, t uint64) string {
	r.mu.Lock()
	st, ok := r.done[t]
	r.mu.Unlock()
	if ok {
		return st
	}
	st, err := r.store.Status(ctx, t)
	if err != nil {
		return ""
	}
	if released(st) {
		r.release(t, st)
	}
	return st
}

// releasedStatus returns round t's status if this gateway knows it released ("" if not),
// without asking the store.
func (r *releases) releasedStatus(t uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done[t]
}

// wake ends the wait of round t's parked calls without recording a status: they read it from
// the store (a round the store does not know).
func (r *releases) wake(t uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.waiting[t]; w != nil {
		close(w.ch)
		delete(r.waiting, t)
	}
}

// park registers a call waiting for round t; the returned channel closes on release.
func (r *releases) park(t uint64) (<-chan struct{}, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiting[t]
	if w == nil {
		w = &roundWait{ch: make(chan struct{})}
		if _, ok := r.done[t]; ok {
			close(w.ch)
		} else {
			r.waiting[t] = w
		}
	}
	w.n++
	return w.ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		w.n--
		if w.n == 0 && r.waiting[t] == w {
			delete(r.waiting, t)
		}
	}
}

// release records round t as released with status st and wakes its parked calls.
func (r *releases) release(t uint64, st string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.done[t]; ok {
		return
	}
	r.done[t] = st
	r.maxT = max(r.maxT, t)
	if len(r.done) > releasedKeep {
		for k := range r.done {
			if k+releasedKeep < r.maxT {
				delete(r.done, k)
			}
		}
	}
	if w := r.waiting[t]; w != nil {
		close(w.ch)
		delete(r.waiting, t)
	}
}

// pending returns the rounds with parked calls.
func (r *releases) pending() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]uint64, 0, len(r.waiting))
	for t := range r.waiting {
		ts = append(ts, t)
	}
	return ts
}

// onNotice handles a ReleaseSubject message.
func (r *releases) onNotice(m *nats.Msg) {
	if len(m.Data) < 8 {
		return
	}
	if st := string(m.Data[8:]); released(st) {
		r.release(binary.BigEndian.Uint64(m.Data), st)
	}
}

// backstop re-reads the status of rounds with parked calls until ctx ends.
func (r *releases) backstop(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, t := range r.pending() {
			st, err := r.store.Status(ctx, t)
			switch {
			case err == nil && released(st):
				r.release(t, st)
			case errors.Is(err, roundstate.ErrNotFound):
				r.wake(t) // parked without a store read (Gateway.fetch): let them find out
			}
		}
	}
}

// currentRound is the open round's M0, followed from the round-info bucket (a KV watch, so
// neither RoundInfo nor Rounds reads the bucket per call).
type currentRound struct {
	mu      sync.Mutex
	first   uint64 // the first round this gateway saw current
	t       uint64
	m0      []byte
	at      time.Time // when t became current at this gateway
	changed chan struct{}
}

// current returns the current round's t and M0 and how long ago it became current at this
// gateway (t = 0: none yet).
func (c *currentRound) current() (uint64, []byte, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t == 0 {
		return 0, nil, 0
	}
	return c.t, c.m0, time.Since(c.at)
}

func newCurrentRound() *currentRound { return &currentRound{changed: make(chan struct{})} }

// get returns the current round (t = 0: none yet) and a channel that closes when it changes.
func (c *currentRound) get() (uint64, []byte, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t, c.m0, c.changed
}

func (c *currentRound) set(m0 []byte) {
	t, ok := mohito.EnvelopeRound(m0)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t <= c.t {
		return
	}
	if c.first == 0 {
		c.first = t
	}
	c.t, c.m0, c.at = t, m0, time.Now()
	close(c.changed)
	c.changed = make(chan struct{})
}

// since returns the first round this gateway saw current (0: none yet): it hears the release
// notice of that round and every later one.
func (c *currentRound) since() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// roundInfoPoll is how often a gateway reads the current round besides watching it (follow).
const roundInfoPoll = time.Second

// follow watches the bucket's current key until ctx ends, re-watching after an error, and
// backs the watch up with a read of the key every pollEvery: when the bucket's stream was
// recreated (a memory stream after every NATS node restarted at once), the client library
// resumes its ordered consumer at the old stream's next sequence, which the new stream reaches
// only after as many puts — the cluster e2e saw the gateways stay on one round for over two
// minutes while the coordinator ran ~70 more. A read newer than anything the watch delivered,
// twice in a row, restarts the watch; the read's round is served meanwhile.
func (c *currentRound) follow(ctx context.Context, kv jetstream.KeyValue, pollEvery time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		mu      sync.Mutex
		watched uint64             // the newest round the current watch delivered
		restart context.CancelFunc // stops the current watch
	)
	go func() {
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		behind := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			e, err := kv.Get(ctx, roundInfoCurrent)
			if err != nil {
				continue
			}
			t, ok := mohito.EnvelopeRound(e.Value())
			if !ok {
				continue
			}
			c.set(e.Value())
			mu.Lock()
			if t > watched {
				behind++
			} else {
				behind = 0
			}
			if behind >= 2 && restart != nil {
				log.Warn("round-info watch stalled; watching again", "watched", watched, "current", t)
				restart()
				restart, behind = nil, 0
			}
			mu.Unlock()
		}
	}()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		w, err := kv.Watch(wctx, roundInfoCurrent)
		if err == nil {
			mu.Lock()
			restart = cancel
			mu.Unlock()
			stopped := context.AfterFunc(wctx, func() { _ = w.Stop() })
			for e := range w.Updates() {
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					c.set(e.Value())
					if t, ok := mohito.EnvelopeRound(e.Value()); ok {
						mu.Lock()
						watched = max(watched, t)
						mu.Unlock()
					}
				}
			}
			stopped()
			_ = w.Stop()
		}
		cancel()
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
