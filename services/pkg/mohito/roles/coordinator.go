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

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// CoordinatorConfig configures the round coordinator.
type CoordinatorConfig struct {
	Deployment Deployment
	JS         jetstream.JetStream // integrator account
	Store      roundstate.Store
	Keys       *mohito.KeyRing // sk_I by epoch; the highest is announced and named by new rounds
	VendorKeys *KeyDirectory   // pk_V by vendor and epoch (key directory); the highest is in force
	ID         string          // replica id for the leader lease
	LeaseTTL   time.Duration   // leader lease (default 3 s)
	MaxRounds  int             // stop once the series has opened this many rounds (0: run forever)
	Log        *slog.Logger
	Metrics    *Metrics
	OnRound    func(RoundReport) // called when a round is planned or aborted
}

// RoundReport is what the coordinator knows about a round.
type RoundReport struct {
	T              uint64
	Shuffler       int
	K, Valid, N, S int
	Opened, Closed time.Time
	Planned        time.Time
	Aborted        bool
	Reason         string
}

// Coordinator is the leader-elected singleton that owns t, V*, C and close.
type Coordinator struct {
	cfg    CoordinatorConfig
	integ  *mohito.Integrator
	sched  *Scheduler
	avail  *availability
	ids    jetstream.KeyValue
	work   jetstream.Stream // StreamWork: a round's work is purged when the round ends
	inbox  jetstream.Stream // StreamIntegratorIn: so are the vendors' messages of the round
	info   *roundInfos
	lease  *natsx.Lease
	mu     sync.Mutex
	active map[uint64]*coordRound
	status *statusBook
	// capacity moves the targets between size classes (nil: Deployment.Policy as set).
	capacity *capacityClass

	announced   uint32 // integrator epoch last announced to the vendors
	hasAnnounce bool
}

type coordRound struct {
	ri      *mohito.RoundInfo
	targets []uint64
	in      chan inboxMsg
	opened  time.Time
}

type inboxMsg struct {
	kind   string
	vendor int
	data   []byte
}

// NewCoordinator prepares buckets and the integrator role.
func NewCoordinator(ctx context.Context, cfg CoordinatorConfig) (*Coordinator, error) {
	if err := cfg.Deployment.Validate(); err != nil {
		return nil, err
	}
	if cfg.VendorKeys == nil || cfg.VendorKeys.Len() != cfg.Deployment.Params.Vendors {
		return nil, fmt.Errorf("coordinator: the key directory does not cover the %d vendors", cfg.Deployment.Params.Vendors)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	if cfg.Keys == nil {
		return nil, errors.New("coordinator: no integrator key ring")
	}
	_, key, ok := cfg.Keys.Current()
	if !ok {
		return nil, errors.New("coordinator: the integrator key ring is empty")
	}
	// The coordinator's stages (admission, close, the share check) never
	// open a layer; the key only fixes the suite.
	integ, err := mohito.NewIntegrator(cfg.Deployment.Params, key)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{cfg: cfg, integ: integ, sched: NewScheduler(cfg.Deployment.Weights), active: map[uint64]*coordRound{},
		avail: newAvailability(cfg.Deployment.Params.Vendors, cfg.Deployment.Round)}
	if c.ids, err = natsx.EnsureKV(ctx, cfg.JS, contract.BucketRounds, 0); err != nil {
		return nil, err
	}
	if c.info, err = openRoundInfos(ctx, cfg.JS); err != nil {
		return nil, err
	}
	if c.lease, err = natsx.NewLease(ctx, cfg.JS, contract.BucketLeader, "coordinator", cfg.ID, cfg.LeaseTTL, cfg.Log); err != nil {
		return nil, err
	}
	if err := EnsureIntegratorStreams(ctx, cfg.JS, &cfg.Deployment); err != nil {
		return nil, err
	}
	if c.work, err = cfg.JS.Stream(ctx, contract.StreamWork); err != nil {
		return nil, err
	}
	if c.inbox, err = cfg.JS.Stream(ctx, contract.StreamIntegratorIn); err != nil {
		return nil, err
	}
	if c.status, err = newStatusBook(ctx, cfg.JS, &cfg.Deployment, cfg.Log); err != nil {
		return nil, err
	}
	c.capacity = newCapacityClass(cfg.Deployment.Classes, time.Now(), c.status.capacityClass())
	cfg.Metrics.CapacityRatio.Set(1)
	if c.capacity != nil {
		_, pct := c.capacity.class()
		cfg.Metrics.CapacityRatio.Set(float64(pct) / 100)
	}
	cfg.Metrics.RoundPeriod.Set(cfg.Deployment.Round.Seconds())
	// Every vendor the scheduler may choose is exported from the start, at 0 skips.
	for v, w := range cfg.Deployment.Weights {
		if w > 0 {
			cfg.Metrics.ShufflerSkips.WithLabelValues(strconv.Itoa(v))
		}
	}
	return c, nil
}

// Run campaigns for leadership and runs the round clock while leader.
func (c *Coordinator) Run(ctx context.Context) error {
	// New vendor key epochs are in force from the first round opened after
	// their announcement.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := WatchVendorKeys(wctx, c.cfg.JS, c.cfg.Deployment.Params, c.cfg.VendorKeys, c.cfg.Log, c.cfg.Metrics); err != nil && wctx.Err() == nil {
			c.cfg.Log.Error("vendor key directory not watched: new vendor key epochs are not picked up", "err", err)
		}
	}()
	// lead and this check run in turn on this goroutine: opened needs no lock.
	c.lease.Lead(ctx, c.lead, func() bool { return !c.seriesDone() })
	return nil
}

// allocate returns a fresh round id by compare-and-set: ids are never reused
// across restarts or leaders (spec O2).
// seriesDone: the series has opened MaxRounds rounds (counted in the status bucket, so over
// every leader and restart).
func (c *Coordinator) seriesDone() bool {
	return c.cfg.MaxRounds > 0 && c.status.openedRounds() >= int64(c.cfg.MaxRounds)
}

func (c *Coordinator) allocate(ctx context.Context) (uint64, error) {
	for ctx.Err() == nil {
		e, err := c.ids.Get(ctx, "last")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := c.ids.Create(ctx, "last", []byte("1")); err == nil {
				return 1, nil
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read round counter: %w", err)
		}
		last, err := strconv.ParseUint(string(e.Value()), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("round counter: %w", err)
		}
		if _, err := c.ids.Update(ctx, "last", []byte(strconv.FormatUint(last+1, 10)), e.Revision()); err == nil {
			return last + 1, nil
		}
	}
	return 0, ctx.Err()
}

// abortStale marks rounds a previous leader left open or closing as aborted,
// so their users re-send (those rounds never reached a vendor). Rounds it left
// delivering (planned, in their response phase) are adopted: watched until
// done, and aborted if the response phase passes first — a leader that lost
// its lease (its lease bucket's NATS node died) stops watching them, and
// without an abort their users would wait for an answer that never comes.
func (c *Coordinator) abortStale(ctx context.Context) {
	e, err := c.ids.Get(ctx, "last")
	if err != nil {
		return
	}
	last, _ := strconv.ParseUint(string(e.Value()), 10, 64)
	for t := last; t > 0 && t+32 > last; t-- {
		st, err := c.cfg.Store.Status(ctx, t)
		if err == nil && st == statusDelivering {
			go c.adopt(ctx, t)
			continue
		}
		if err == nil && (st == roundstate.StatusOpen || st == roundstate.StatusClosed) {
			_, _ = c.cfg.Store.Close(ctx, t)
			_ = c.cfg.Store.SetStatus(ctx, t, roundstate.StatusAborted)
			c.cfg.Metrics.Rounds.WithLabelValues("aborted").Inc()
			c.notifyAbort(ctx, t)
			c.status.aborted(ctx, t, -1)
			c.report(RoundReport{T: t, Aborted: true, Reason: "coordinator restarted"})
			c.cfg.Log.Warn("round aborted", "t", t, "reason", "coordinator restarted")
			c.purgeWork(ctx, t)
		}
	}
}

// statusDelivering is a planned round's status while its responses are routed.
const statusDelivering = "delivering"

// adopt watches a round a previous leader left delivering until it is done, or aborts it once
// a response phase has passed (as finish does for its own rounds).
func (c *Coordinator) adopt(ctx context.Context, t uint64) {
	deadline := time.Now().Add(c.cfg.Deployment.ResponsePhase())
	for time.Now().Before(deadline) {
		if st, _ := c.cfg.Store.Status(ctx, t); st != statusDelivering {
			if st == roundstate.StatusDone {
				c.purgeWork(ctx, t)
			}
			return // done, or aborted by another leader (who purges it)
		}
		if !clock.Sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
	_ = c.cfg.Store.SetStatus(ctx, t, roundstate.StatusAborted)
	c.cfg.Metrics.Rounds.WithLabelValues("aborted").Inc()
	c.status.aborted(ctx, t, -1)
	c.report(RoundReport{T: t, Aborted: true, Reason: "response phase timed out under a previous leader"})
	c.cfg.Log.Warn("round aborted", "t", t, "reason", "response phase timed out under a previous leader")
	c.purgeWork(ctx, t)
}

// purgeWork removes round t's work (its plan, decrypted parts and response-layer shares) from
// StreamWork, and the vendors' messages of round t from the integrator's inbox, once the round
// is done or aborted: nothing reads them again, and on memory storage they would hold the NATS
// servers' memory for WorkTTL (the inbox's own age). A purge that fails leaves them to the age.
// (The vendors' inboxes are theirs: their round messages go by age.)
func (c *Coordinator) purgeWork(ctx context.Context, t uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.work.Purge(ctx, jetstream.WithPurgeSubject(contract.WorkRound(t))); err != nil {
		c.cfg.Log.Warn("round work not purged", "t", t, "err", err)
	}
	if err := c.inbox.Purge(ctx, jetstream.WithPurgeSubject(contract.FromVendorsRound(t))); err != nil {
		c.cfg.Log.Warn("round's inbox messages not purged", "t", t, "err", err)
	}
}

// lead runs the round clock while this replica holds the lease. When it is told to stop
// (ctx ends while the lease is still held: a rollout, SIGTERM) it opens no new round but lets the
// rounds in flight finish — the one still collecting closes at once — so a rolling update aborts
// no round; the next leader starts after it. Rounds in flight end at once if the lease is lost
// (another replica may lead) or the drain outlasts drainTimeout.
func (c *Coordinator) lead(ctx context.Context, lost <-chan struct{}) error {
	c.abortStale(ctx)
	rctx, endRounds := context.WithCancel(context.WithoutCancel(ctx))
	defer endRounds()
	go func() {
		select {
		case <-lost:
		case <-rctx.Done():
		case <-ctx.Done():
			select {
			case <-lost:
			case <-rctx.Done():
			case <-time.After(c.drainTimeout()):
				c.cfg.Log.Warn("rounds in flight did not finish before the drain timeout", "timeout", c.drainTimeout().String())
			}
		}
		endRounds()
	}()
	cctx, stop := context.WithCancel(rctx)
	defer stop()
	go natsx.Consume(cctx, c.cfg.JS, natsx.ConsumerSpec{
		Stream:     contract.StreamIntegratorIn,
		Durable:    "coordinator",
		Filters:    []string{contract.FromVendors(contract.KindChallenge), contract.FromVendors(contract.KindVerdict), contract.FromVendors(contract.KindSummary)},
		DeliverNew: true,
	}, c.cfg.Log, c.dispatch)
	var wg sync.WaitGroup
	defer wg.Wait() // runs first: the rounds in flight finish under rctx
	// Pipelining (spec §3.5, Fig. 4): when round t's period ends, t+1 is opened first and t is
	// closed (in the background) only once t+1's M0 is published, so users always have an open
	// round to submit to (closing first left a gap of t+1's allocation and opening, in which
	// every submission was refused). When stopping, or on an error, t closes at once.
	var prev *coordRound
	closePrev := func() {
		if r := prev; r != nil {
			prev = nil
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.finish(rctx, r)
			}()
		}
	}
	defer closePrev()
	next := time.Now()
	for ctx.Err() == nil {
		if c.seriesDone() {
			c.cfg.Log.Info("series complete: opening no more rounds", "max_rounds", c.cfg.MaxRounds)
			return nil
		}
		t, err := c.allocate(ctx)
		if err != nil {
			return err
		}
		r, err := c.open(ctx, t)
		if err != nil {
			return err
		}
		closePrev()
		prev = r
		next = next.Add(c.cfg.Deployment.Round)
		if !clock.Sleep(ctx, time.Until(next)) {
			break
		}
	}
	if ctx.Err() != nil {
		c.cfg.Log.Info("stopping: no new rounds; finishing the rounds in flight")
	}
	return nil
}

// drainTimeout bounds a graceful stop: a round closed at once runs its shuffler exchange and its
// response phase (finish's own deadlines), plus slack.
func (c *Coordinator) drainTimeout() time.Duration {
	d := &c.cfg.Deployment
	return d.ShufflerTimeout + d.ResponsePhase() + 2*time.Second
}

func (c *Coordinator) open(ctx context.Context, t uint64) (*coordRound, error) {
	d := &c.cfg.Deployment
	now := time.Now()
	out := make([]bool, d.Params.Vendors)
	for v := range out {
		out[v] = c.avail.out(v, now)
	}
	s := c.sched.Next(func(v int) bool { return out[v] })
	// Counted once per choice and vendor passed by (Next may ask about a vendor twice).
	for v, o := range out {
		if o && v != s && d.Weights[v] > 0 {
			c.cfg.Metrics.ShufflerSkips.WithLabelValues(strconv.Itoa(v)).Inc()
		}
	}
	targets, err := mohito.DrawTargets(c.capacity.policy(d.Policy), d.Delta, rand.Reader)
	if err != nil {
		return nil, err
	}
	ri, err := c.roundInfo(ctx, t, s)
	if err != nil {
		return nil, err
	}
	m0, err := ri.MarshalBinary()
	if err != nil {
		return nil, err
	}
	r := &coordRound{ri: ri, targets: targets, in: make(chan inboxMsg, 16), opened: time.Now()}
	c.mu.Lock()
	c.active[t] = r
	c.mu.Unlock()
	if err := c.cfg.Store.SetStatus(ctx, t, roundstate.StatusOpen); err != nil {
		return nil, fmt.Errorf("open round %d: %w", t, err)
	}
	// Every vendor learns t and V* (spec §3.5); V* before any user can submit.
	for v := range d.Params.Vendors {
		if err := natsx.Publish(ctx, c.cfg.JS, contract.ToVendor(v, t, contract.KindInfo), fmt.Sprintf("info-%d", t), m0, nil); err != nil {
			return nil, err
		}
	}
	if err := c.info.put(ctx, t, m0); err != nil {
		return nil, err
	}
	c.status.opened(ctx, t, s)
	c.cfg.Log.Info("round opened", "t", t, "shuffler", s, "integrator_epoch", ri.IntegratorEpoch, "shuffler_epoch", ri.ShufflerEpoch())
	return r, nil
}

// roundInfo names the keys in force for round t (spec O16): the
// integrator's current epoch and every vendor's highest announced epoch. A
// new integrator epoch is announced to the vendors before the first round
// that names it, so shufflers can seal their fakes to it.
func (c *Coordinator) roundInfo(ctx context.Context, t uint64, s int) (*mohito.RoundInfo, error) {
	d := &c.cfg.Deployment
	ie, ik, ok := c.cfg.Keys.Current()
	if !ok {
		return nil, errors.New("the integrator key ring is empty")
	}
	if !c.hasAnnounce || c.announced != ie {
		ks := c.cfg.Keys.PublicKeys()
		for v := range d.Params.Vendors {
			if err := AnnounceIntegratorKey(ctx, c.cfg.JS, v, ks); err != nil {
				return nil, fmt.Errorf("announce integrator key epoch %d to vendor %d: %w", ie, v, err)
			}
		}
		if c.hasAnnounce {
			c.cfg.Log.Info("integrator key epoch in force", "epoch", ie, "previous", c.announced, "from_round", t)
		}
		c.announced, c.hasAnnounce = ie, true
	}
	ri := &mohito.RoundInfo{T: t, Shuffler: uint32(s), Params: d.Params, IntegratorKey: ik.PublicKey(), IntegratorEpoch: ie, VendorEpochs: make([]uint32, d.Params.Vendors)}
	for v := range d.Params.Vendors {
		cur, ok := c.cfg.VendorKeys.Current(v)
		if !ok {
			return nil, fmt.Errorf("round %d: vendor %d has announced no key", t, v)
		}
		ri.VendorEpochs[v] = cur.Epoch
		if v == s {
			ri.ShufflerKey = cur.Key
		}
	}
	if dropped := c.cfg.Keys.Observe(t, ie); len(dropped) > 0 {
		c.cfg.Log.Info("integrator key epochs retired", "epochs", dropped, "round", t)
	}
	return ri, nil
}

func (c *Coordinator) dispatch(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		c.cfg.Metrics.Dropped.WithLabelValues("subject").Inc()
		return natsx.Drop
	}
	c.mu.Lock()
	r := c.active[p.T]
	c.mu.Unlock()
	if r == nil || int(r.ri.Shuffler) != p.Vendor {
		c.cfg.Metrics.Dropped.WithLabelValues("stale").Inc()
		return natsx.Drop
	}
	select {
	case r.in <- inboxMsg{kind: p.Kind, vendor: p.Vendor, data: m.Data()}:
		return natsx.Ack
	case <-ctx.Done():
		return natsx.Retry
	}
}

func (c *Coordinator) await(ctx context.Context, r *coordRound, kind string) ([]byte, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case m := <-r.in:
			if m.kind == kind {
				return m.data, nil
			}
		}
	}
}

// notifyAbort tells every vendor that round t will carry no table, so
// agents that deliver rounds in order do not wait for it. Every vendor sees
// that a round produced nothing anyway.
func (c *Coordinator) notifyAbort(ctx context.Context, t uint64) {
	for v := range c.cfg.Deployment.Params.Vendors {
		_ = natsx.Publish(ctx, c.cfg.JS, contract.ToVendor(v, t, contract.KindAbort), fmt.Sprintf("abort-%d", t), []byte{1}, nil)
	}
}

func (c *Coordinator) report(rep RoundReport) {
	if c.cfg.OnRound != nil {
		c.cfg.OnRound(rep)
	}
}

// Abort reasons that take V*'s vendor out of the rotation for a while.
const (
	reasonShufflerSilent      = "shuffler did not answer"
	reasonShufflerUnreachable = "shuffler unreachable"
)

// finish closes round r: replays the admitted M1s, re-forwards what the
// gateways could not, runs close, the G2 check and Y with V*, and publishes
// the plan. If V* does not answer within ShufflerTimeout the round is aborted
// (G7: never skip the shuffler).
func (c *Coordinator) finish(ctx context.Context, r *coordRound) {
	t := r.ri.T
	rep := RoundReport{T: t, Shuffler: int(r.ri.Shuffler), Opened: r.opened}
	defer func() {
		c.mu.Lock()
		delete(c.active, t)
		c.mu.Unlock()
	}()
	abort := func(reason string, err error) {
		rep.Aborted, rep.Reason = true, reason
		if reason == reasonShufflerSilent || reason == reasonShufflerUnreachable {
			out := c.avail.failed(rep.Shuffler, rep.Opened, time.Now())
			c.cfg.Log.Warn("shuffler out of the rotation", "vendor", rep.Shuffler, "for", out.String())
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = c.cfg.Store.SetStatus(actx, t, roundstate.StatusAborted)
		c.cfg.Metrics.Rounds.WithLabelValues("aborted").Inc()
		c.cfg.Log.Warn("round aborted", "t", t, "reason", reason, "err", err)
		c.notifyAbort(actx, t)
		c.status.aborted(actx, t, rep.Shuffler)
		c.report(rep)
		c.purgeWork(actx, t)
	}
	k, err := c.cfg.Store.Close(ctx, t)
	if err != nil {
		abort("close failed", err)
		return
	}
	rep.Closed = time.Now()
	_ = c.cfg.Store.SetStatus(ctx, t, roundstate.StatusClosed)
	adm, err := c.cfg.Store.Admitted(ctx, t)
	if err != nil || len(adm) != k {
		abort("admissions unreadable", err)
		return
	}
	ir, err := c.integ.NewRound(r.ri, r.targets)
	if err != nil {
		abort("round state", err)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.Deployment.ShufflerTimeout)
	defer cancel()
	vs := int(r.ri.Shuffler)
	for _, a := range adm {
		idx, m2, err := ir.Admit(a.User, a.M1)
		if err != nil || idx != a.Index {
			abort("admission replay mismatch", err)
			return
		}
		if !a.Forwarded {
			if err := natsx.Publish(sctx, c.cfg.JS, contract.ToVendor(vs, t, contract.KindForward), fwdID(t, idx), m2, nil); err != nil {
				abort(reasonShufflerUnreachable, err)
				return
			}
		}
	}
	m3, err := ir.Close()
	if err == nil {
		err = natsx.Publish(sctx, c.cfg.JS, contract.ToVendor(vs, t, contract.KindClose), fmt.Sprintf("close-%d", t), m3, nil)
	}
	if err != nil {
		abort(reasonShufflerUnreachable, err)
		return
	}
	ch, err := c.await(sctx, r, contract.KindChallenge)
	if err != nil {
		abort(reasonShufflerSilent, err)
		return
	}
	reply, err := ir.Reply(ch)
	if err == nil {
		err = natsx.Publish(sctx, c.cfg.JS, contract.ToVendor(vs, t, contract.KindReply), fmt.Sprintf("reply-%d", t), reply, nil)
	}
	if err != nil {
		abort("share check", err)
		return
	}
	verdict, err := c.await(sctx, r, contract.KindVerdict)
	if err != nil {
		abort(reasonShufflerSilent, err)
		return
	}
	fin, err := ir.Finish(verdict)
	if err == nil {
		err = natsx.Publish(sctx, c.cfg.JS, contract.ToVendor(vs, t, contract.KindFinish), fmt.Sprintf("finish-%d", t), fin, nil)
	}
	if err != nil {
		abort("share check", err)
		return
	}
	sumMsg, err := c.await(sctx, r, contract.KindSummary)
	if err != nil {
		abort(reasonShufflerSilent, err)
		return
	}
	sum, counts, err := ir.AcceptSummary(sumMsg)
	if err != nil {
		abort("bad summary", err)
		return
	}
	valid := 0
	for i := range k {
		if ir.Valid(i) {
			valid++
		}
	}
	pl := &plan{T: t, Shuffler: r.ri.Shuffler, N: sum.N, S: sum.S, K: k, Counts: counts}
	if err := natsx.Publish(ctx, c.cfg.JS, contract.WorkPlan(t), fmt.Sprintf("plan-%d", t), pl.marshal(), nil); err != nil {
		abort("plan not durable", err)
		return
	}
	_ = c.cfg.Store.SetStatus(ctx, t, statusDelivering)
	rep.K, rep.Valid, rep.N, rep.S, rep.Planned = k, valid, sum.N, sum.S, time.Now()
	c.cfg.Metrics.StageSeconds.WithLabelValues("close_to_plan").Observe(rep.Planned.Sub(rep.Closed).Seconds())
	if sum.S > 0 {
		c.cfg.Metrics.Bursts.Inc()
		c.cfg.Metrics.BurstExcess.Add(float64(sum.S))
	}
	c.cfg.Log.Info("round planned", "t", t, "k", k, "n", sum.N, "burst", sum.S)
	c.avail.ok(rep.Shuffler)
	var class *plannedClass
	if c.capacity != nil {
		ch := c.capacity.observe(time.Now(), rep.N, rep.Valid, rep.S)
		class = &plannedClass{}
		class.idx, class.percent = c.capacity.class()
		c.cfg.Metrics.CapacityRatio.Set(float64(class.percent) / 100)
		if ch.HasChanged {
			c.cfg.Log.Info(ch.String(), "t", t)
			class.change = &ch
		}
	}
	c.status.planned(ctx, rep, class)
	c.report(rep)
	// Response phase deadline (spec O12): if V* never returns M10 the
	// round is aborted so users re-send. Commands of such a round may have
	// reached their devices; a re-send is a new command (new cmd_id).
	deadline := time.Now().Add(c.cfg.Deployment.ResponsePhase())
	for time.Now().Before(deadline) {
		if st, _ := c.cfg.Store.Status(ctx, t); st == roundstate.StatusDone {
			done := time.Now()
			c.cfg.Metrics.Rounds.WithLabelValues("done").Inc()
			c.cfg.Metrics.RoundSeconds.Observe(done.Sub(rep.Closed).Seconds())
			c.cfg.Metrics.RoundWork.Observe(max(done.Sub(rep.Closed)-c.cfg.Deployment.ResponseDeadline, 0).Seconds())
			c.status.completed(ctx, rep, done)
			c.purgeWork(ctx, t)
			return
		}
		if !clock.Sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
	rep.Aborted, rep.Reason = true, "response phase timed out"
	_ = c.cfg.Store.SetStatus(ctx, t, roundstate.StatusAborted)
	c.cfg.Metrics.Rounds.WithLabelValues("aborted").Inc()
	c.cfg.Log.Warn("round aborted", "t", t, "reason", rep.Reason)
	c.status.aborted(ctx, t, rep.Shuffler)
	c.report(rep)
	c.purgeWork(ctx, t)
}
