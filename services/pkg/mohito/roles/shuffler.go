package roles

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// ShufflerService is vendor v acting as V* in the rounds that select it.
// π, the fake set and the response keys stay in this process (spec §10).
type ShufflerService struct {
	cfg      VendorConfig
	mu       sync.Mutex
	rounds   map[uint64]*shufRound
	draining bool // stopping: no new round, the ones in flight finish
	// drains is the graceful stop finishing its rounds after it released the lease (serve).
	drains sync.WaitGroup

	poolMu sync.Mutex
	pools  map[uint32]*mohito.FakePool // by integrator key epoch
}

type shufRound struct {
	sh         *mohito.Shuffler // bound to the round's key epochs
	sr         *mohito.ShuffleRound
	n          int
	challenged bool
	respDone   bool
	first      time.Time
	// undecryptable counts the round's users' messages whose outer layer did not open.
	undecryptable atomic.Int64
}

// NewShufflerService returns the shuffler of cfg.Vendor.
func NewShufflerService(ctx context.Context, cfg VendorConfig) (*ShufflerService, error) {
	if err := EnsureVendorStreams(ctx, cfg.JS, cfg.Vendor, &cfg.Deployment); err != nil {
		return nil, err
	}
	if cfg.Keys == nil || cfg.Keys.Len() == 0 {
		return nil, errors.New("shuffler: no vendor key")
	}
	if cfg.Keys.Suite() != cfg.Deployment.Params.Suite {
		return nil, fmt.Errorf("shuffler: %v keys for a %v deployment", cfg.Keys.Suite(), cfg.Deployment.Params.Suite)
	}
	s := &ShufflerService{cfg: cfg, rounds: map[uint64]*shufRound{}, pools: map[uint32]*mohito.FakePool{}}
	s.integratorKeys(cfg.Integrator)
	return s, nil
}

// keepPools is how many integrator epochs have a fake pool: the current one
// and the one before (rounds in flight when it rotated).
const keepPools = 2

// integratorKeys makes a fake pool for every announced integrator epoch,
// so fakes for a new epoch are ready before the first round names it (G7).
func (s *ShufflerService) integratorKeys(ks mohito.KeySet) {
	for _, e := range ks {
		s.pool(e.Epoch, e.Key)
	}
}

// pool returns the fake pool of integrator epoch e for key pk, replacing a
// pool for another key and forgetting the oldest beyond keepPools.
func (s *ShufflerService) pool(e uint32, pk *mohito.PublicKey) *mohito.FakePool {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	if p := s.pools[e]; p != nil && p.Key().Equal(pk) {
		return p
	}
	p := mohito.NewFakePool(s.cfg.Deployment.Params, pk)
	s.pools[e] = p
	for len(s.pools) > keepPools {
		oldest := e
		for k := range s.pools {
			oldest = min(oldest, k)
		}
		if oldest == e {
			break
		}
		delete(s.pools, oldest)
	}
	return p
}

func (s *ShufflerService) poolList() []*mohito.FakePool {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	out := make([]*mohito.FakePool, 0, len(s.pools))
	for _, p := range s.pools {
		out = append(out, p)
	}
	return out
}

// Run fills the fake pool and serves rounds until ctx ends.
func (s *ShufflerService) Run(ctx context.Context) error {
	go s.fillPool(ctx)
	go func() {
		err := WatchIntegratorKeys(ctx, s.cfg.JS, s.cfg.Vendor, s.cfg.Deployment.Params, s.cfg.Log, s.cfg.Metrics, s.integratorKeys)
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("integrator key directory not watched: fakes for a new epoch are made when its first round opens", "err", err)
		}
	}()
	err := leadVendorRole(ctx, s.cfg, "shuffler", s.serve)
	s.drains.Wait()
	return err
}

// serve is one leadership. One shuffler takes new rounds per vendor: a round's messages (its
// info, the forwarded M2, close, reply, finish, response layers) must all reach the replica that
// holds its state (π, the fakes, the response keys), and a replica NAKs the messages of rounds it
// does not hold, for the one that does (handle).
//
// When told to stop (ctx ends, the lease still held) it takes no new round and releases the lease
// at once — serve returns — so the standby leads and takes the next rounds while this replica
// finishes the rounds it shuffles (or gives up after drainTimeout) beside it; Run waits for that.
// Holding the lease through the drain left no one to take the rounds opened meanwhile: the drain
// lasts until the last round's response phase ends (its vendors' fixed release, ~ResponseDeadline
// after the plan, and longer on a loaded machine), more than the coordinator waits for V* — under
// load every handover aborted two or three rounds of this vendor (TestShufflerRollingUpdate).
func (s *ShufflerService) serve(ctx context.Context, lost <-chan struct{}) error {
	s.mu.Lock()
	s.rounds, s.draining = map[uint64]*shufRound{}, false
	s.mu.Unlock()
	cctx, stopConsume := context.WithCancel(context.WithoutCancel(ctx))
	in := contract.VendorInbox(s.cfg.Vendor)
	var filters []string
	for _, k := range []string{contract.KindInfo, contract.KindForward, contract.KindClose, contract.KindReply, contract.KindFinish, contract.KindRespLayer} {
		filters = append(filters, in+".r.*."+k)
	}
	consumed := make(chan error, 1)
	go func() {
		consumed <- natsx.Consume(cctx, s.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamVendorIn, Durable: "shuffler", Filters: filters, AckWait: 10 * time.Second, Batch: 128, DeliverNew: true}, s.cfg.Log, s.handle)
	}()
	select {
	case err := <-consumed:
		stopConsume()
		return err
	case <-ctx.Done():
	}
	// Lead closes lost before it ends ctx: a lease lost ends the work at once (another replica
	// may lead already and hold rounds this one took).
	select {
	case <-lost:
		stopConsume()
		return <-consumed
	default:
	}
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	n := s.inFlight()
	s.cfg.Log.Info("stopping: releasing the lease to the standby; finishing the rounds in flight", "rounds", n)
	s.drains.Add(1)
	go func() {
		defer s.drains.Done()
		defer func() { stopConsume(); <-consumed }()
		deadline := time.NewTimer(s.drainTimeout())
		defer deadline.Stop()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for s.inFlight() > 0 {
			select {
			case <-deadline.C:
				s.cfg.Log.Warn("rounds in flight did not finish before the drain timeout", "rounds", s.inFlight())
				return
			case <-tk.C:
			}
		}
	}()
	return nil
}

// roundLife bounds how long a round can need this shuffler: collection, the exchange with the
// coordinator and the response phase.
func (s *ShufflerService) roundLife() time.Duration {
	d := &s.cfg.Deployment
	return d.Round + d.ResponsePhase()
}

func (s *ShufflerService) drainTimeout() time.Duration { return s.roundLife() + 2*time.Second }

// inFlight counts the rounds this shuffler serves that can still complete.
func (s *ShufflerService) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rounds {
		if !r.respDone && time.Since(r.first) < s.roundLife() {
			n++
		}
	}
	return n
}

// young reports whether m may still belong to a round that can complete: a message of a round
// this replica does not know yet (its info comes later, or from a replica that stopped) waits
// for it rather than being dropped.
func (s *ShufflerService) young(m jetstream.Msg) bool {
	md, err := m.Metadata()
	return err == nil && time.Since(md.Timestamp) < s.roundLife()
}

// fillPool keeps pre-generated fakes so emission never waits on fake
// generation (spec G7).
func (s *ShufflerService) fillPool(ctx context.Context) {
	want := s.cfg.FakePool
	if want == 0 {
		want = 64
	}
	tk := time.NewTicker(200 * time.Millisecond)
	defer tk.Stop()
	for {
		for _, pool := range s.poolList() {
			for v := range s.cfg.Deployment.Params.Vendors {
				if ctx.Err() != nil {
					return
				}
				_ = pool.Fill(uint32(v), want, rand.Reader)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

func (s *ShufflerService) publish(ctx context.Context, t uint64, kind, id string, b []byte) error {
	return natsx.Publish(ctx, s.cfg.JS, contract.ToIntegrator(s.cfg.Vendor, t, kind), id, b, nil)
}

func (s *ShufflerService) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil || p.Vendor != s.cfg.Vendor {
		return natsx.Drop
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Kind == contract.KindInfo {
		ri, err := mohito.ParseRoundInfo(m.Data())
		if err != nil || ri.T != p.T {
			return natsx.Drop
		}
		// Every vendor sees every round's key ids, so each retires its
		// superseded epochs on the same rounds (spec O16).
		if dropped := s.cfg.Keys.Observe(p.T, ri.VendorEpoch(uint32(s.cfg.Vendor))); len(dropped) > 0 {
			s.cfg.Log.Info("vendor key epochs retired", "epochs", dropped, "round", p.T)
		}
		if int(ri.Shuffler) != s.cfg.Vendor || s.rounds[p.T] != nil {
			return natsx.Ack
		}
		if s.draining {
			return handOver(m) // the next leader takes this round
		}
		key, err := s.cfg.Keys.KeyFor(ri.ShufflerEpoch(), ri.ShufflerKey)
		if err != nil {
			// The coordinator aborts the round when V* does not answer.
			s.cfg.Metrics.Dropped.WithLabelValues("key_epoch").Inc()
			s.cfg.Log.Error("cannot shuffle round: key epoch not held", "t", p.T, "epoch", ri.ShufflerEpoch(), "held", s.cfg.Keys.Epochs(), "err", err)
			return natsx.Drop
		}
		sh, err := mohito.NewShuffler(uint32(s.cfg.Vendor), s.cfg.Deployment.Params, key, s.pool(ri.IntegratorEpoch, ri.IntegratorKey))
		if err != nil {
			return natsx.Drop
		}
		sr, err := sh.NewRound(ri, nil)
		if err != nil {
			s.cfg.Log.Error("cannot shuffle round", "t", p.T, "err", err)
			return natsx.Drop
		}
		s.rounds[p.T] = &shufRound{sh: sh, sr: sr, first: time.Now()}
		for t, r := range s.rounds {
			if time.Since(r.first) > staleAfter {
				delete(s.rounds, t)
			}
		}
		return natsx.Ack
	}
	r := s.rounds[p.T]
	if r == nil {
		if s.young(m) {
			if s.draining {
				return handOver(m) // a round of the next leader
			}
			// Its info has not reached this replica yet, or it is a round of a replica that is
			// stopping and finishes it.
			return natsx.Retry
		}
		// State lost in a crash, or too old: the coordinator aborts the round.
		s.cfg.Metrics.Dropped.WithLabelValues("unknown_round").Inc()
		return natsx.Drop
	}
	switch p.Kind {
	case contract.KindForward:
		// One M2 (the coordinator's re-forward at close) or a gateway's batch of them, back
		// to back (gateway_forward.go); M2 has a fixed size.
		data, size := m.Data(), s.cfg.Deployment.Params.ForwardSize()
		if len(data) == 0 || len(data)%size != 0 {
			s.cfg.Metrics.Dropped.WithLabelValues("bad_m2").Inc()
			return natsx.Drop
		}
		for off := 0; off < len(data); off += size {
			idx, layer, err := r.sh.OpenForward(p.T, data[off:off+size:off+size])
			switch {
			case err == nil:
			case errors.Is(err, mohito.ErrDecrypt) || errors.Is(err, mohito.ErrNonCanonical):
				layer = nil
			default:
				s.cfg.Metrics.Dropped.WithLabelValues("bad_m2").Inc()
				continue
			}
			err = r.sr.Accept(idx, layer)
			if err == nil && layer == nil {
				r.undecryptable.Add(1) // once per index: a redelivery is ErrIndex
			}
		}
		return s.maybeChallenge(ctx, p.T, r)
	case contract.KindClose:
		if err := r.sr.Close(m.Data()); err != nil && !errors.Is(err, mohito.ErrPhase) {
			return natsx.Drop
		}
		return s.maybeChallenge(ctx, p.T, r)
	case contract.KindReply:
		v, err := r.sr.Verdict(m.Data())
		if err != nil {
			return natsx.Drop
		}
		if err := s.publish(ctx, p.T, contract.KindVerdict, fmt.Sprintf("verdict-%d", p.T), v); err != nil {
			return natsx.Retry
		}
	case contract.KindFinish:
		sum, err := r.sr.Finish(m.Data())
		if err != nil {
			return natsx.Drop
		}
		if err := s.publish(ctx, p.T, contract.KindSummary, fmt.Sprintf("sum-%d", p.T), sum); err != nil {
			return natsx.Retry
		}
		st := r.sr.Stats()
		r.n = st.N
		s.cfg.Metrics.Fakes.Add(float64(st.Fakes))
		// Every invalid message of the round, by why: its outer layer did not open,
		// it was a copy of another envelope, or its shares failed the G2 check.
		undecryptable := int(r.undecryptable.Load())
		for reason, n := range map[string]int{
			"undecryptable_outer": undecryptable,
			"replayed_envelope":   st.Replayed,
			"share_check":         st.K - st.Valid - undecryptable - st.Replayed,
		} {
			if n > 0 {
				s.cfg.Metrics.Rejected.WithLabelValues(reason).Add(float64(n))
			}
		}
		if st.S > 0 {
			s.cfg.Metrics.ShufflerBursts.Inc()
		}
		// Only now, with every message and Y in hand, is anything emitted (G7).
		d := &s.cfg.Deployment
		for start := 0; start < st.N; start += d.OutBatch {
			m4, err := r.sr.Output(start, min(d.OutBatch, st.N-start))
			if err != nil {
				return natsx.Drop
			}
			if err := s.publish(ctx, p.T, contract.KindShuffled, fmt.Sprintf("shuf-%d-%d", p.T, start), m4); err != nil {
				return natsx.Retry
			}
		}
	case contract.KindRespLayer:
		if r.respDone {
			return natsx.Ack
		}
		if err := r.sr.AcceptResponses(m.Data()); err != nil && !errors.Is(err, mohito.ErrIndex) {
			return natsx.Drop
		}
		out, err := r.sr.ResponsesOut(s.cfg.Deployment.OutBatch)
		if errors.Is(err, mohito.ErrRoundOpen) {
			return natsx.Ack
		}
		if err != nil {
			return natsx.Drop
		}
		for i, m10 := range out {
			if err := s.publish(ctx, p.T, contract.KindRespOut, fmt.Sprintf("rout-%d-%d", p.T, i), m10); err != nil {
				return natsx.Retry
			}
		}
		r.respDone = true
		delete(s.rounds, p.T)
	}
	return natsx.Ack
}

// handOverDelay is how soon a stopping shuffler's NAK of a message of the next leader's round
// lets the server deliver it again. Both consume the shuffler's durable while the stopping one
// drains (serve), so about every other message of the leader's rounds reaches the stopping one;
// the retry delay (200 ms) on each would add up over a round's exchange with the coordinator
// (info, close, reply, finish in turn), which must fit in the shuffler timeout.
const handOverDelay = 10 * time.Millisecond

// handOver gives m back for the leader after handOverDelay; it is settled here.
func handOver(m jetstream.Msg) natsx.Outcome {
	_ = m.NakWithDelay(handOverDelay)
	return natsx.Hold
}

func (s *ShufflerService) maybeChallenge(ctx context.Context, t uint64, r *shufRound) natsx.Outcome {
	if r.challenged || !r.sr.Ready() {
		return natsx.Ack
	}
	ch, err := r.sr.Challenge()
	if err != nil {
		return natsx.Drop
	}
	r.challenged = true
	if err := s.publish(ctx, t, contract.KindChallenge, fmt.Sprintf("ch-%d", t), ch); err != nil {
		return natsx.Retry
	}
	return natsx.Ack
}
