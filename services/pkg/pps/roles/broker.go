package roles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// Broker is the PPS broker (trust domain B, spec §2.1, §5.3): it relays device setup messages
// to the garbler, stores the one label per input bit each publisher sends, and on every
// schedule tick of a pipeline resolves its input slots, runs the consistency check with the
// garbler, nullifies, asks the garbler for a garbled circuit and evaluates it while the
// stream arrives, then publishes o⊕r on the function topic. It holds no protocol secret:
// it never sees a second label of a wire, a seed, Δ or r (§10 #5), and it never logs labels,
// masked outputs or device message bodies.
//
// Values of a device. A device may be bound to several topics (of one pipeline or several).
// Each of its publish messages carries one value per topic bound to it, in lexicographic
// order of the topics, so the value index of a slot (SlotInput.value, D5) is the position of
// its topic among the device's topics; a message with another number of values is rejected.
type Broker struct {
	opt   BrokerOptions
	log   *slog.Logger
	m     *BrokerMetrics
	store *BrokerStore
	clk   BrokerClock
	rand  io.Reader

	mu  sync.RWMutex
	set *brokerSet
	gen chan struct{} // closed when SetPipelines installs a new set

	inflight sync.WaitGroup // executions running

	registered atomic.Bool // every pipeline got an answer from RegisterFunction
	workers    chan struct{}

	ot brokerOT // the OT-extension session of hardened executions (H1, D21)
	// kkrt is the replica's KKRT consistency-check session with the garbler (D16b), over
	// kkrtT; its checks are serialised.
	kkrt  *pps.KKRTChecker
	kkrtT *brokerKKRT
	// win holds the labels checked during the collection window (WindowCheck).
	win *windowChecks
}

// BrokerOptions configure a Broker.
type BrokerOptions struct {
	// NC is the broker's NATS connection (user contract.BrokerUser); JS its JetStream context.
	NC *nats.Conn
	JS jetstream.JetStream
	// Redis is the broker's own Redis (never shared with the garbler's domain).
	Redis redis.UniversalClient
	// Garbler is the gRPC client of the garbler (mutual TLS, trusting only the garbler
	// domain's CA).
	Garbler ppsv1.GarblerClient
	// Pipelines are the functions to run (contract.ReadPipelines).
	Pipelines []contract.Pipeline
	// Workers bounds concurrent executions (default 2).
	Workers int
	// ChunkBytes is the garbled stream's chunk size asked of the garbler and the evaluator's
	// read window (default gc.DefaultChunkSize).
	ChunkBytes int
	// StreamReplicas is the replica count of the three streams (default 1; 3 in production).
	StreamReplicas int
	// Replica names this broker replica in the scheduler lease (default: host name and a
	// random suffix).
	Replica string
	// LeaseTTL is the scheduler lease's TTL (default 10 s): how long a crashed leader's
	// ticks wait for a standby.
	LeaseTTL   time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Check is the consistency check of faithful pipelines that do not name one:
	// contract.CheckKKRT (default) or contract.CheckOPRF.
	Check string
	// WindowCheck checks each publish's labels with KKRT as it is stored, during the
	// collection window, so that the tick checks only what was not checked yet
	// (broker_window.go). Off, every check runs at the tick.
	WindowCheck bool
	// Pregarble garbles each faithful function's next execution ahead of its inputs, during
	// the window (broker_pregarble.go): the broker holds its AND tables (32 B per AND gate,
	// circuits up to MaxPregarbleANDs) and the tick streams the input-dependent rest only.
	Pregarble bool
	// Clock drives the schedule (default: the wall clock); Rand draws execution ids and the
	// consistency check's seed and blinds (default crypto/rand).
	Clock BrokerClock
	Rand  io.Reader
}

// BrokerClock is the time source of the scheduler.
type BrokerClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// brokerSet is one installed set of pipelines, immutable once built.
type brokerSet struct {
	fns []*brokerFunction // in pipeline order
	// topics maps a device to the topics bound to it, sorted: its publish messages carry
	// one value per topic in this order.
	topics map[string][]string
	// maxLag is, per device, the largest window lag any slot reads it at: rounds older than
	// the latest used minus maxLag are never asked for again (Release, D8).
	maxLag    map[string]int
	retention time.Duration
	// labels and masked name the devices some faithful, resp. hardened (H1), pipeline reads:
	// their publish messages must carry labels, resp. masked values (a device feeding both
	// modes sends both).
	labels, masked map[string]bool
}

// brokerFunction is one pipeline's compiled function and its registration state.
type brokerFunction struct {
	p    contract.Pipeline
	f    *dsl.Function
	plan *gc.Plan
	// slotPub is the device id feeding each slot, slotValue its value index.
	slotPub   []string
	slotValue []int
	subs      map[string]bool
	// hardened: the pipeline runs in H1 (D21): masked values and OT extension, no
	// consistency check.
	hardened bool

	mu     sync.Mutex
	status string // "pending", FunctionRegistered or FunctionRefused
	reason string
	epoch  uint64
	pre    pregarbleState // the next execution garbled ahead (BrokerOptions.Pregarble)
}

// mode is the function's input mode on the garbler link.
func (f *brokerFunction) mode() ppsv1.Mode {
	if f.hardened {
		return ppsv1.Mode_MODE_HARDENED
	}
	return ppsv1.Mode_MODE_FAITHFUL
}

func (f *brokerFunction) state() (status, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, f.reason
}

// DefaultBrokerRetention is the shortest retention of labels and of PPS_PUB: 26 h covers a
// daily statistic's window and its schedule (spec §5.3).
const DefaultBrokerRetention = 26 * time.Hour

// OutRetention is PPS_OUT's max age: late or reconnecting subscribers catch up (spec §5.3).
const OutRetention = 7 * 24 * time.Hour

// compileBrokerPipelines validates and compiles a set of pipelines as the broker runs them:
// each is valid (contract, faithful or hardened), compiles, binds every topic its program reads to a
// publisher and every bound topic is read, and no two pipelines are the same function.
func compileBrokerPipelines(ps []contract.Pipeline) (*brokerSet, error) {
	set := &brokerSet{topics: map[string][]string{}, maxLag: map[string]int{}, retention: DefaultBrokerRetention,
		labels: map[string]bool{}, masked: map[string]bool{}}
	var errs []error
	seen := map[string]string{}
	names := map[string]bool{}
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("pipeline %q listed twice", p.Name))
			continue
		}
		names[p.Name] = true
		f, err := dsl.Compile(p.Source)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %q: compile: %w", p.Name, err))
			continue
		}
		if other, ok := seen[f.ID]; ok {
			errs = append(errs, fmt.Errorf("pipelines %q and %q are the same function %s", other, p.Name, f.ID))
			continue
		}
		seen[f.ID] = p.Name
		plan, err := gc.Compile(f.Circuit)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %q: plan: %w", p.Name, err))
			continue
		}
		bf := &brokerFunction{p: p, f: f, plan: plan, status: "pending", subs: map[string]bool{}, hardened: p.Mode == contract.ModeHardened}
		bound := map[string]string{}
		for _, pub := range p.Publishers {
			bound[pub.Topic] = pub.DeviceID
		}
		read := map[string]bool{}
		for s, spec := range f.Layout.Slots {
			id, ok := bound[spec.Topic]
			if !ok {
				errs = append(errs, fmt.Errorf("pipeline %q: topic %q of slot %d has no publisher", p.Name, spec.Topic, s))
				continue
			}
			read[spec.Topic] = true
			bf.slotPub = append(bf.slotPub, id)
			lag := 0
			if spec.Source == pps.Window {
				lag = spec.Lag
			}
			set.maxLag[id] = max(set.maxLag[id], lag)
		}
		for _, pub := range p.Publishers {
			if !read[pub.Topic] {
				errs = append(errs, fmt.Errorf("pipeline %q: publisher topic %q is not read by the program", p.Name, pub.Topic))
			}
			if p.Mode == contract.ModeHardened {
				set.masked[pub.DeviceID] = true
			} else {
				set.labels[pub.DeviceID] = true
			}
			if !slices.Contains(set.topics[pub.DeviceID], pub.Topic) {
				set.topics[pub.DeviceID] = append(set.topics[pub.DeviceID], pub.Topic)
			}
		}
		for _, s := range p.Subscribers {
			bf.subs[s] = true
		}
		set.retention = max(set.retention, p.Window.Duration+p.Schedule.Duration, p.SeedTTL.Duration)
		set.fns = append(set.fns, bf)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for id := range set.topics {
		sort.Strings(set.topics[id])
	}
	for _, bf := range set.fns {
		for s, spec := range bf.f.Layout.Slots {
			bf.slotValue = append(bf.slotValue, slices.Index(set.topics[bf.slotPub[s]], spec.Topic))
		}
	}
	return set, nil
}

// ValidateBrokerPipelines is the configuration check of the broker's pipelines file (the
// command exits 2 on its error).
func ValidateBrokerPipelines(ps []contract.Pipeline) error {
	_, err := compileBrokerPipelines(ps)
	return err
}

// NewBroker validates the options and compiles the pipelines. It does no I/O.
func NewBroker(opt BrokerOptions) (*Broker, error) {
	var errs []error
	if opt.NC == nil || opt.JS == nil {
		errs = append(errs, errors.New("broker: no NATS connection"))
	}
	if opt.Redis == nil {
		errs = append(errs, errors.New("broker: no Redis"))
	}
	if opt.Garbler == nil {
		errs = append(errs, errors.New("broker: no garbler client"))
	}
	if opt.Workers < 0 || opt.ChunkBytes < 0 || opt.StreamReplicas < 0 || opt.LeaseTTL < 0 {
		errs = append(errs, errors.New("broker: negative workers, chunk bytes, stream replicas or lease TTL"))
	}
	if opt.Check == "" {
		opt.Check = contract.CheckKKRT
	}
	if opt.Check != contract.CheckKKRT && opt.Check != contract.CheckOPRF {
		errs = append(errs, fmt.Errorf("broker: consistency check %q, want %q or %q", opt.Check, contract.CheckKKRT, contract.CheckOPRF))
	}
	set, err := compileBrokerPipelines(opt.Pipelines)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opt.Workers == 0 {
		opt.Workers = 2
	}
	if opt.ChunkBytes == 0 {
		opt.ChunkBytes = gc.DefaultChunkSize
	}
	if opt.StreamReplicas == 0 {
		opt.StreamReplicas = 1
	}
	if opt.LeaseTTL == 0 {
		opt.LeaseTTL = 10 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = telemetry.Discard()
	}
	if opt.Clock == nil {
		opt.Clock = wallClock{}
	}
	if opt.Rand == nil {
		opt.Rand = rand.Reader
	}
	if opt.Replica == "" {
		host, _ := os.Hostname()
		var r [4]byte
		if _, err := io.ReadFull(opt.Rand, r[:]); err != nil {
			return nil, err
		}
		opt.Replica = host + "-" + hex.EncodeToString(r[:])
	}
	b := &Broker{
		opt: opt, log: opt.Logger, m: NewBrokerMetrics(opt.Registerer), clk: opt.Clock, rand: opt.Rand,
		store: NewBrokerStore(opt.Redis, set.retention), set: set, gen: make(chan struct{}),
		workers: make(chan struct{}, opt.Workers),
		kkrtT:   &brokerKKRT{g: opt.Garbler},
		win:     newWindowChecks(),
	}
	b.kkrt = &pps.KKRTChecker{Garbler: b.kkrtT, Rand: opt.Rand}
	b.publishFunctionStates()
	return b, nil
}

// Store is the broker's Redis store (for status readers and tests).
func (b *Broker) Store() *BrokerStore { return b.store }

// Metrics are the broker's metrics.
func (b *Broker) Metrics() *BrokerMetrics { return b.m }

func (b *Broker) current() *brokerSet {
	set, _ := b.currentGen()
	return set
}

// currentGen returns the installed set and a channel closed when it is replaced.
func (b *Broker) currentGen() (*brokerSet, <-chan struct{}) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.set, b.gen
}

// function returns the installed function fn, or nil.
func (b *Broker) function(fn string) *brokerFunction {
	for _, f := range b.current().fns {
		if f.f.ID == fn {
			return f
		}
	}
	return nil
}

// EnsureBrokerStreams creates or updates the three streams of the contract: PPS_PUB kept
// for the longest retention a pipeline needs, PPS_DEV as a work queue, PPS_OUT for 7 days.
func EnsureBrokerStreams(ctx context.Context, js jetstream.JetStream, retention time.Duration, replicas int) error {
	cfgs := []jetstream.StreamConfig{
		{Name: contract.PubStream, Subjects: []string{contract.PubSubjects}, MaxAge: max(retention, DefaultBrokerRetention),
			MaxMsgSize: contract.MaxDeviceMessage},
		{Name: contract.DevStream, Subjects: []string{contract.DevSubjects}, Retention: jetstream.WorkQueuePolicy,
			MaxAge: 24 * time.Hour, MaxMsgSize: contract.MaxDeviceMessage},
		{Name: contract.OutStream, Subjects: []string{contract.OutSubjects}, MaxAge: OutRetention,
			Duplicates: 10 * time.Minute},
	}
	for _, c := range cfgs {
		c.Storage = jetstream.FileStorage
		c.Replicas = max(replicas, 1)
		if _, err := js.CreateOrUpdateStream(ctx, c); err != nil {
			return fmt.Errorf("ensure stream %s: %w", c.Name, err)
		}
	}
	return nil
}

// EnsureStreams creates or updates the broker's streams for its pipelines.
func (b *Broker) EnsureStreams(ctx context.Context) error {
	return EnsureBrokerStreams(ctx, b.opt.JS, b.current().retention, b.opt.StreamReplicas)
}

// Durable consumer names.
const (
	BrokerPubDurable = contract.BrokerDurable + "-pub"
	BrokerDevDurable = contract.BrokerDurable + "-dev"
)

// Checks are the broker's readiness conditions: its streams and consumers, its Redis and the
// garbler link (RegisterFunction answered for every pipeline).
func (b *Broker) Checks() []func(context.Context) error {
	js := b.opt.JS
	stream := func(name string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := js.Stream(ctx, name); return err }
	}
	consumer := func(s, d string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := js.Consumer(ctx, s, d); return err }
	}
	return []func(context.Context) error{
		stream(contract.PubStream), stream(contract.DevStream), stream(contract.OutStream),
		consumer(contract.PubStream, BrokerPubDurable), consumer(contract.DevStream, BrokerDevDurable),
		func(ctx context.Context) error { return b.opt.Redis.Ping(ctx).Err() },
		func(context.Context) error {
			if !b.registered.Load() {
				return errors.New("garbler link: functions not registered yet")
			}
			return nil
		},
	}
}

// Run runs the broker until ctx ends: the streams, the function registrations, the setup
// relay and publish ingest consumers, and the scheduler.
func (b *Broker) Run(ctx context.Context) error {
	if err := b.EnsureStreams(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, _ := telemetry.NewGroup(ctx)
	g.Go("register", b.runRegistrations)
	g.Go("consumers", func(ctx context.Context) error {
		return natsx.ConsumeAll(ctx, b.opt.JS, b.log,
			natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.DevStream, Durable: BrokerDevDurable,
				Filters: []string{contract.DevSubjects}, AckWait: time.Minute, Batch: 16}, Handler: b.handleSetup},
			natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.PubStream, Durable: BrokerPubDurable,
				Filters: []string{contract.PubSubjects}, DeliverNew: false}, Handler: b.handleLabels},
		)
	})
	g.Go("scheduler", b.runScheduler)
	if b.opt.WindowCheck {
		g.Go("window-checks", b.runWindowChecks)
	}
	return g.Wait()
}

// SetPipelines installs a new set of pipelines (the pipelines file changed): it is compiled
// and validated first, and refused as a whole (the old set keeps running) if it is invalid.
// New functions are registered with the garbler, subscribers no longer listed are revoked.
func (b *Broker) SetPipelines(ps []contract.Pipeline) error {
	set, err := compileBrokerPipelines(ps)
	if err != nil {
		b.m.Rejected.WithLabelValues(stageFunction, "invalid_pipelines").Inc()
		return err
	}
	b.mu.Lock()
	old := b.set
	// A function kept across the update keeps its registration.
	for _, f := range set.fns {
		for _, o := range old.fns {
			if o.f.ID == f.f.ID {
				st, reason := o.state()
				o.mu.Lock()
				f.status, f.reason, f.epoch = st, reason, o.epoch
				o.mu.Unlock()
			}
		}
	}
	b.set = set
	b.win.reset()
	b.store.SetRetention(set.retention)
	close(b.gen)
	b.gen = make(chan struct{})
	b.mu.Unlock()
	b.registered.Store(false)
	b.m.Functions.Reset()
	b.m.FunctionInfo.Reset()
	b.publishFunctionStates()
	return nil
}

// runRegistrations registers every pipeline's function with the garbler (retrying while it
// is unreachable) and revokes subscribers no longer listed, at start and after every
// SetPipelines.
func (b *Broker) runRegistrations(ctx context.Context) error {
	for {
		_, gen := b.currentGen()
		wait := 100 * time.Millisecond
		for ctx.Err() == nil {
			if b.registerAll(ctx) {
				break
			}
			if !clock.Sleep(ctx, wait) {
				return nil
			}
			wait = min(2*wait, 5*time.Second)
		}
		b.registered.Store(true)
		b.prepareSessions(ctx)
		for ctx.Err() == nil {
			if b.revokeRemoved(ctx) == nil {
				break
			}
			if !clock.Sleep(ctx, wait) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-gen:
		}
	}
}

// prepareSessions sets up, once the functions are registered, the replica's sessions with
// the garbler that its pipelines will need: the KKRT session (D16b) when a faithful pipeline
// checks with KKRT, the OT-extension session (H1, D21) when a pipeline is hardened. Their
// base OTs (512 resp. 128 each side) are then off the first execution's path. A failure is
// only logged: the first execution sets up.
func (b *Broker) prepareSessions(ctx context.Context) {
	var kkrt, ot bool
	for _, f := range b.current().fns {
		if st, _ := f.state(); st != FunctionRegistered {
			continue
		}
		check := f.p.Check
		if check == "" {
			check = b.opt.Check
		}
		kkrt = kkrt || (!f.hardened && check == contract.CheckKKRT)
		ot = ot || f.hardened
		b.pregarble(ctx, f)
	}
	if kkrt && b.kkrtT.setups.Load() == 0 {
		if err := b.kkrt.Setup(ctx); err != nil {
			b.log.Warn("KKRT session setup ahead of the first check", "err", err)
		}
	}
	if ot {
		b.ot.mu.Lock()
		if b.ot.r == nil {
			if err := b.ot.setup(ctx, b.opt.Garbler); err != nil {
				b.log.Warn("OT session setup ahead of the first hardened execution", "err", err)
			}
		}
		b.ot.mu.Unlock()
	}
}

// registerAll registers each pending function; it reports whether every function has an
// answer (registered or refused).
func (b *Broker) registerAll(ctx context.Context) bool {
	done := true
	for _, f := range b.current().fns {
		if st, _ := f.state(); st != "pending" {
			continue
		}
		if err := b.register(ctx, f); err != nil {
			b.log.Warn("register function with the garbler, retrying", "pipeline", f.p.Name, "err", err)
			done = false
		}
	}
	b.publishFunctionStates()
	return done
}

// register is spec §5.2 step 2: the garbler compiles the same source; a function on which
// the two circuit hashes differ is refused, never run.
func (b *Broker) register(ctx context.Context, f *brokerFunction) error {
	resp, err := b.opt.Garbler.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{
		Source: f.p.Source, Mode: f.mode(), SeedTtlSeconds: uint64(f.p.SeedTTL.Seconds())})
	if err != nil {
		if brokerPermanent(err) {
			b.refuse(ctx, f, reasonGarbler, fmt.Sprintf("garbler refused the function: %v", err))
			return nil
		}
		return err
	}
	hash := f.f.Circuit.Hash()
	switch {
	case resp.FnId != f.f.ID:
		b.refuse(ctx, f, reasonIDMismatch, fmt.Sprintf("garbler compiled function id %.40q, broker %s", resp.FnId, f.f.ID))
		return nil
	case !slices.Equal(resp.CircuitHash, hash[:]):
		b.refuse(ctx, f, reasonHashMismatch, "garbler and broker compiled different circuits (circuit hash differs)")
		return nil
	}
	f.mu.Lock()
	f.status, f.reason, f.epoch = FunctionRegistered, "", resp.Epoch
	f.mu.Unlock()
	b.log.Info("function registered", "pipeline", f.p.Name, "fn", f.f.ID, "mode", modeName(f.mode()), "and_gates", f.plan.ANDCount(),
		"slots", len(f.f.Layout.Slots), "epoch", resp.Epoch)
	return b.store.SetFunction(ctx, f.f.ID, FunctionState{Pipeline: f.p.Name, Status: FunctionRegistered,
		CircuitHash: hash, ANDGates: uint64(f.plan.ANDCount()), Slots: uint32(len(f.f.Layout.Slots)),
		OutputBits: uint32(f.f.OutputBits()), Epoch: resp.Epoch, Round: resp.Round})
}

func (b *Broker) refuse(ctx context.Context, f *brokerFunction, reason, detail string) {
	f.mu.Lock()
	f.status, f.reason = FunctionRefused, detail
	f.mu.Unlock()
	b.m.Rejected.WithLabelValues(stageFunction, reason).Inc()
	b.log.Error("function refused", "pipeline", f.p.Name, "fn", f.f.ID, "reason", detail)
	if err := b.store.SetFunction(ctx, f.f.ID, FunctionState{Pipeline: f.p.Name, Status: FunctionRefused, Reason: detail,
		CircuitHash: f.f.Circuit.Hash()}); err != nil {
		b.log.Warn("record refused function", "pipeline", f.p.Name, "err", err)
	}
}

func (b *Broker) publishFunctionStates() {
	for _, f := range b.current().fns {
		hash := f.f.Circuit.Hash()
		b.m.FunctionInfo.WithLabelValues(f.p.Name, f.f.ID, hex.EncodeToString(hash[:])).Set(1)
		b.m.ANDGates.WithLabelValues(f.p.Name).Set(float64(f.plan.ANDCount()))
		st, _ := f.state()
		for _, s := range []string{"pending", FunctionRegistered, FunctionRefused} {
			v := 0.0
			if s == st {
				v = 1
			}
			b.m.Functions.WithLabelValues(f.p.Name, s).Set(v)
		}
		// Every nullification reason of the pipeline is exported from the start, at 0.
		for _, r := range []pps.NullReason{pps.Missing, pps.Inconsistent, pps.NotAllowed, pps.Erased} {
			b.m.Nullified.WithLabelValues(f.p.Name, r.String())
		}
	}
}

// FunctionStatus returns the state of the pipeline's function: "pending", "registered" or
// "refused" with its reason; ok is false for an unknown pipeline.
func (b *Broker) FunctionStatus(pipeline string) (id, status, reason string, ok bool) {
	for _, f := range b.current().fns {
		if f.p.Name == pipeline {
			st, r := f.state()
			return f.f.ID, st, r, true
		}
	}
	return "", "", "", false
}
