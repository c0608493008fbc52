package roles

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// VendorConfig configures a vendor's services (its own account).
type VendorConfig struct {
	Deployment Deployment
	Vendor     int
	NC         *nats.Conn
	JS         jetstream.JetStream
	Keys       *mohito.KeyRing    // sk_V by epoch (shuffler)
	Integrator mohito.KeySet      // pk_I by epoch as announced (fake pools; later epochs are watched)
	Devices    []RegisteredDevice // the vendor's devices (agent)
	FakePool   int                // fakes kept per vendor in the pool
	ID         string             // replica id for the agent's leader lease (agent)
	Log        *slog.Logger
	Metrics    *Metrics
}

// RegisteredDevice is what a vendor knows about one device: its id on the
// vendor's channel and k_D^prf (never k_D^ae, spec G4).
type RegisteredDevice struct {
	ID  string
	PRF [mohito.KeySize]byte
}

// EnsureVendorStreams creates vendor v's inbox stream.
func EnsureVendorStreams(ctx context.Context, js jetstream.JetStream, v int) error {
	_, err := natsx.EnsureStream(ctx, js, contract.StreamVendorIn, contract.VendorInbox(v)+".>")
	return err
}

// ShufflerService is vendor v acting as V* in the rounds that select it.
// π, the fake set and the response keys stay in this process (spec §10).
type ShufflerService struct {
	cfg      VendorConfig
	mu       sync.Mutex
	rounds   map[uint64]*shufRound
	draining bool // stopping: no new round, the ones in flight finish

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
}

// NewShufflerService returns the shuffler of cfg.Vendor.
func NewShufflerService(ctx context.Context, cfg VendorConfig) (*ShufflerService, error) {
	if err := EnsureVendorStreams(ctx, cfg.JS, cfg.Vendor); err != nil {
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
	return leadVendorRole(ctx, s.cfg, "shuffler", s.serve)
}

// serve is one leadership. One shuffler is active per vendor: a round's messages (its info, the
// forwarded M2, close, reply, finish, response layers) must all reach the replica that holds its
// state (π, the fakes, the response keys). When told to stop it takes no new round, finishes the
// rounds in flight (or gives up after drainTimeout) and only then lets a standby lead.
func (s *ShufflerService) serve(ctx context.Context, lost <-chan struct{}) error {
	s.mu.Lock()
	s.rounds, s.draining = map[uint64]*shufRound{}, false
	s.mu.Unlock()
	cctx, stopConsume := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsume()
	go func() {
		select {
		case <-lost:
		case <-cctx.Done():
		case <-ctx.Done():
			s.mu.Lock()
			s.draining = true
			s.mu.Unlock()
			deadline := time.NewTimer(s.drainTimeout())
			defer deadline.Stop()
			tk := time.NewTicker(100 * time.Millisecond)
			defer tk.Stop()
			for s.inFlight() > 0 {
				select {
				case <-lost:
				case <-deadline.C:
					s.cfg.Log.Warn("rounds in flight did not finish before the drain timeout", "rounds", s.inFlight())
				case <-tk.C:
					continue
				}
				break
			}
		}
		stopConsume()
	}()
	in := contract.VendorInbox(s.cfg.Vendor)
	var filters []string
	for _, k := range []string{contract.KindInfo, contract.KindForward, contract.KindClose, contract.KindReply, contract.KindFinish, contract.KindRespLayer} {
		filters = append(filters, in+".r.*."+k)
	}
	return natsx.Consume(cctx, s.cfg.JS, natsx.ConsumerSpec{Stream: contract.StreamVendorIn, Durable: "shuffler", Filters: filters, AckWait: 10 * time.Second, Batch: 128, DeliverNew: true}, s.cfg.Log, s.handle)
}

// roundLife bounds how long a round can need this shuffler: collection, the exchange with the
// coordinator and the response phase.
func (s *ShufflerService) roundLife() time.Duration {
	d := &s.cfg.Deployment
	return d.Round + d.ShufflerTimeout + 3*d.ResponseDeadline
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
			return natsx.Retry // the next leader takes this round
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
			// Its info has not reached this replica yet, or this replica is stopping and the
			// next leader takes the round.
			return natsx.Retry
		}
		// State lost in a crash, or too old: the coordinator aborts the round.
		s.cfg.Metrics.Dropped.WithLabelValues("unknown_round").Inc()
		return natsx.Drop
	}
	switch p.Kind {
	case contract.KindForward:
		idx, layer, err := r.sh.OpenForward(p.T, m.Data())
		switch {
		case err == nil:
		case errors.Is(err, mohito.ErrDecrypt) || errors.Is(err, mohito.ErrNonCanonical):
			layer = nil
		default:
			s.cfg.Metrics.Dropped.WithLabelValues("bad_m2").Inc()
			return natsx.Drop
		}
		if err := r.sr.Accept(idx, layer); err != nil && !errors.Is(err, mohito.ErrIndex) {
			return natsx.Drop
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
		if st.S > 0 {
			s.cfg.Metrics.Bursts.Inc()
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

// VendorAgent is vendor v's device gateway, decoder and response encoder:
// every registered device gets exactly one M6 per round whether or not it
// has a command (spec C6), and the response table always covers every
// device (O11: a silent device's slots are random).
type VendorAgent struct {
	cfg    VendorConfig
	vendor *mohito.Vendor
	index  map[string]int
	active []int
	mu     sync.Mutex
	order  sync.Mutex // serialises deliveries in round order
	rounds map[uint64]*agentRound
	blobs  *natsx.BlobAssembler
	sub    *nats.Subscription
	// inflight counts the rounds sent to devices whose response table is not out yet.
	inflight sync.WaitGroup
}

// VendorLeaseTTL is the leader lease of a vendor's agent and shuffler: a standby replica takes
// over within it after a crash, at once after a graceful stop.
const VendorLeaseTTL = 3 * time.Second

// leadVendorRole runs serve while this replica holds the lease "<role>-<vendor>" of bucket
// BucketVendorLeases in the vendor's account, until ctx ends (natsx.Lease.Lead).
func leadVendorRole(ctx context.Context, cfg VendorConfig, role string, serve func(context.Context, <-chan struct{}) error) error {
	id := cfg.ID
	if id == "" {
		id = fmt.Sprintf("%s-%d", role, time.Now().UnixNano())
	}
	lease, err := natsx.NewLease(ctx, cfg.JS, contract.BucketVendorLeases, fmt.Sprintf("%s-%d", role, cfg.Vendor), id, VendorLeaseTTL, cfg.Log)
	if err != nil {
		return fmt.Errorf("%s lease: %w", role, err)
	}
	lease.Lead(ctx, serve, nil)
	return nil
}

type agentRound struct {
	vr        *mohito.VendorRound
	infoMsgs  []jetstream.Msg
	answered  map[int]bool
	all       chan struct{}
	table     []byte          // M5, once complete
	tableMsgs []jetstream.Msg // its chunks, acked after S_v^resp is durable
	delivered bool
	dead      bool // aborted: no table will come
	first     time.Time
}

// NewVendorAgent returns the agent of cfg.Vendor.
func NewVendorAgent(ctx context.Context, cfg VendorConfig) (*VendorAgent, error) {
	if err := EnsureVendorStreams(ctx, cfg.JS, cfg.Vendor); err != nil {
		return nil, err
	}
	prf := make([][mohito.KeySize]byte, len(cfg.Devices))
	idx := map[string]int{}
	active := make([]int, len(cfg.Devices))
	for i, d := range cfg.Devices {
		prf[i] = d.PRF
		idx[d.ID] = i
		active[i] = i
	}
	v, err := mohito.NewVendor(uint32(cfg.Vendor), cfg.Deployment.Params, prf)
	if err != nil {
		return nil, err
	}
	return &VendorAgent{cfg: cfg, vendor: v, index: idx, active: active, rounds: map[uint64]*agentRound{}, blobs: natsx.NewBlobAssembler()}, nil
}

// Run serves rounds while this replica holds the vendor's agent lease, until ctx ends. One
// agent is active per vendor: devices accept rounds only in increasing order, so two agents
// delivering at once (a rolling update, replicas > 1) would make devices drop the commands of
// the older round while its response table still went out. Standby replicas wait for the lease.
func (a *VendorAgent) Run(ctx context.Context) error {
	return leadVendorRole(ctx, a.cfg, "agent", a.serve)
}

// serve is one leadership: it consumes the vendor's inbox until ctx ends, then hands over
// gracefully — the rounds already sent to devices still send their response tables, and the
// messages of rounds not delivered yet are released for the next leader at once.
func (a *VendorAgent) serve(ctx context.Context, _ <-chan struct{}) error {
	a.mu.Lock()
	a.rounds = map[uint64]*agentRound{}
	a.mu.Unlock()
	sub, err := a.cfg.NC.Subscribe(contract.DeviceResponses, a.onResponse)
	if err != nil {
		return fmt.Errorf("subscribe to device responses: %w", err)
	}
	sub.SetPendingLimits(-1, -1)
	in := contract.VendorInbox(a.cfg.Vendor)
	err = natsx.Consume(ctx, a.cfg.JS, natsx.ConsumerSpec{
		Stream: contract.StreamVendorIn, Durable: "agent", Filters: []string{in + ".r.*." + contract.KindInfo, in + ".r.*." + contract.KindTable, in + ".r.*." + contract.KindAbort},
		AckWait: 30 * time.Second, Batch: 64, DeliverNew: true,
	}, a.cfg.Log, func(ctx context.Context, m jetstream.Msg) natsx.Outcome { return a.handle(ctx, m) })
	a.inflight.Wait()
	_ = sub.Unsubscribe()
	a.handBack()
	return err
}

// handBack releases the messages of every round not delivered, so the next leader gets them
// without waiting for their ack deadline.
func (a *VendorAgent) handBack() {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for t, r := range a.rounds {
		if !r.delivered {
			for _, m := range append(r.infoMsgs, r.tableMsgs...) {
				_ = m.Nak()
			}
			n++
		}
		delete(a.rounds, t)
	}
	if n > 0 {
		a.cfg.Log.Info("handed undelivered rounds back", "rounds", n)
	}
}

func (a *VendorAgent) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil || p.Vendor != a.cfg.Vendor {
		return natsx.Drop
	}
	if md, err := m.Metadata(); err == nil && time.Since(md.Timestamp) > staleAfter {
		return natsx.Drop
	}
	switch p.Kind {
	case contract.KindInfo:
		ri, err := mohito.ParseRoundInfo(m.Data())
		if err != nil || ri.T != p.T {
			return natsx.Drop
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		r := a.rounds[p.T]
		if r == nil {
			// 𝒟_a is snapshotted here (spec O11).
			vr, err := a.vendor.NewRound(ri, a.active)
			if err != nil {
				return natsx.Drop
			}
			r = &agentRound{vr: vr, answered: map[int]bool{}, all: make(chan struct{}), first: time.Now()}
			a.rounds[p.T] = r
			for t, old := range a.rounds {
				if time.Since(old.first) > staleAfter {
					delete(a.rounds, t)
				}
			}
		}
		if r.delivered {
			return natsx.Ack
		}
		r.infoMsgs = append(r.infoMsgs, m)
		return natsx.Hold
	case contract.KindAbort:
		a.mu.Lock()
		if r := a.rounds[p.T]; r != nil {
			r.dead = true
		}
		a.mu.Unlock()
		a.pump(ctx)
		return natsx.Ack
	case contract.KindTable:
		blob, msgs, err := a.blobs.Add(m)
		if err != nil {
			for _, mm := range msgs {
				_ = mm.Term()
			}
			return natsx.Hold
		}
		if blob == nil {
			return natsx.Hold
		}
		a.mu.Lock()
		r := a.rounds[p.T]
		if r == nil || r.delivered || r.table != nil {
			a.mu.Unlock()
			for _, mm := range msgs {
				if r == nil {
					_ = mm.NakWithDelay(time.Second) // info not seen yet
				} else if r.delivered {
					_ = mm.DoubleAck(ctx)
				}
			}
			return natsx.Hold
		}
		r.table, r.tableMsgs = blob, msgs
		a.mu.Unlock()
		a.pump(ctx)
		return natsx.Hold
	}
	return natsx.Drop
}

// pump delivers complete rounds strictly in round order: devices reject a
// round older than the last they saw (replay protection), so a late table
// (a redelivery after an encoder restart) holds later rounds back instead of
// being rejected. Aborted rounds are skipped.
func (a *VendorAgent) pump(ctx context.Context) {
	a.order.Lock()
	defer a.order.Unlock()
	for {
		a.mu.Lock()
		nt, next := a.next(time.Now())
		if next == nil || next.table == nil {
			a.mu.Unlock()
			return
		}
		next.delivered = true
		table, msgs := next.table, next.tableMsgs
		next.table, next.tableMsgs = nil, nil
		a.mu.Unlock()
		if !a.send(nt, next, table, msgs) {
			continue
		}
		// The response table goes out even when leadership ends meanwhile: the devices have
		// the round's commands.
		a.inflight.Add(1)
		go func() {
			defer a.inflight.Done()
			a.collect(context.WithoutCancel(ctx), nt, next, msgs)
		}()
	}
}

// next is the oldest round not yet delivered and not dead (nil if none), so pump delivers it
// once its table is complete and holds every later round back until then. A round whose
// table has not come by the time the integrator would have aborted it (its period, the
// shuffler's timeout, the response deadline, a second of slack) is marked dead on the way even
// if its abort notice was lost (e.g. published while NATS restarted): it must not hold every
// later round back. Callers hold a.mu.
func (a *VendorAgent) next(now time.Time) (uint64, *agentRound) {
	d := &a.cfg.Deployment
	hold := d.Round + d.ShufflerTimeout + d.ResponseDeadline + time.Second
	var next *agentRound
	var nt uint64
	for t, r := range a.rounds {
		if r.delivered || r.dead {
			continue
		}
		if age := now.Sub(r.first); age > staleAfter || (r.table == nil && age > hold) {
			r.dead = true
			continue
		}
		if next == nil || t < nt {
			next, nt = r, t
		}
	}
	return nt, next
}

// deliver decodes S_v at every active device's q ids, sends every device one
// M6, waits for the responses until the fixed deadline and sends S_v^resp.
func (a *VendorAgent) send(t uint64, r *agentRound, m5 []byte, msgs []jetstream.Msg) bool {
	d := &a.cfg.Deployment
	start := time.Now()
	fail := func(err error) bool {
		a.cfg.Log.Warn("round delivery failed", "t", t, "err", err)
		for _, mm := range msgs {
			_ = mm.Term()
		}
		return false
	}
	table, _, err := mohito.ParseCommandTable(d.Params, t, uint32(a.cfg.Vendor), d.Capacity[a.cfg.Vendor], m5)
	if err != nil {
		return fail(err)
	}
	m6s, err := r.vr.DecodeCommands(table)
	if err != nil {
		return fail(err)
	}
	for i, di := range r.vr.Active() {
		if err := a.cfg.NC.Publish(contract.DeviceCommandSubject(a.cfg.Devices[di].ID), m6s[i]); err != nil {
			return fail(err)
		}
	}
	_ = a.cfg.NC.Flush()
	a.cfg.Metrics.StageSeconds.WithLabelValues("vendor_decode").Observe(time.Since(start).Seconds())
	return true
}

// collect waits for the device responses until the deadline and sends S_v^resp.
func (a *VendorAgent) collect(ctx context.Context, t uint64, r *agentRound, msgs []jetstream.Msg) {
	d := &a.cfg.Deployment
	start := time.Now()
	fail := func(err error) {
		a.cfg.Log.Warn("response table failed", "t", t, "err", err)
	}
	// A fixed deadline, not "as soon as the last device answered", would
	// hide device timing fully (G7); waiting for all with a deadline keeps
	// the demo fast and the set of senders identical every round.
	tm := time.NewTimer(d.ResponseDeadline)
	select {
	case <-r.all:
	case <-tm.C:
	case <-ctx.Done():
		tm.Stop()
		return
	}
	tm.Stop()
	a.mu.Lock()
	rt, capacity, err := r.vr.EncodeResponses(d.Quantum, rand.Reader)
	a.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	m8, err := mohito.MarshalTable(mohito.KindResponseTable, t, uint32(a.cfg.Vendor), capacity, rt)
	if err != nil {
		fail(err)
		return
	}
	if err := natsx.SendBlob(ctx, a.cfg.JS, contract.ToIntegrator(a.cfg.Vendor, t, contract.KindRespTable), fmt.Sprintf("rtab-%d-%d", t, a.cfg.Vendor), m8); err != nil {
		a.cfg.Log.Warn("response table not sent", "t", t, "err", err)
		return
	}
	for _, mm := range append(msgs, r.infoMsgs...) {
		_ = mm.DoubleAck(ctx)
	}
	a.cfg.Metrics.StageSeconds.WithLabelValues("vendor_round").Observe(time.Since(start).Seconds())
}

func (a *VendorAgent) onResponse(m *nats.Msg) {
	id := contract.DeviceOfResponse(m.Subject)
	di, ok := a.index[id]
	t, hasHeader := mohito.EnvelopeRound(m.Data)
	if !ok || !hasHeader {
		a.cfg.Metrics.Dropped.WithLabelValues("device_response").Inc()
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.rounds[t]
	if r == nil || r.answered[di] {
		return
	}
	// Every device is active, so its active position is its index.
	if err := r.vr.AcceptResponse(di, m.Data); err != nil {
		a.cfg.Metrics.Dropped.WithLabelValues("device_response").Inc()
		return
	}
	r.answered[di] = true
	if len(r.answered) == len(r.vr.Active()) {
		close(r.all)
	}
}
