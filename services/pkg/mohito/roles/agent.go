package roles

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

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
	limit  *deviceLimiter // per-device publish limit
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
	sentAt    time.Time       // when S_v's commands went to the devices
	released  bool            // S_v^resp is being built: later answers are late
	table     []byte          // M5, once complete
	tableMsgs []jetstream.Msg // its chunks, acked after S_v^resp is durable
	delivered bool
	dead      bool // aborted: no table will come
	first     time.Time
}

// NewVendorAgent returns the agent of cfg.Vendor.
func NewVendorAgent(ctx context.Context, cfg VendorConfig) (*VendorAgent, error) {
	if err := EnsureVendorStreams(ctx, cfg.JS, cfg.Vendor, &cfg.Deployment); err != nil {
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
	rate, burst := cfg.DeviceRate, cfg.DeviceBurst
	if rate <= 0 {
		rate = DeviceRate(cfg.Deployment.Round)
	}
	if burst <= 0 {
		burst = DefaultDeviceBurst
	}
	return &VendorAgent{cfg: cfg, vendor: v, index: idx, active: active, rounds: map[uint64]*agentRound{}, blobs: natsx.NewBlobAssembler(),
		limit: newDeviceLimiter(rate, burst, nil)}, nil
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
			r = &agentRound{vr: vr, answered: map[int]bool{}, first: time.Now()}
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
		blob, msgs, o := a.blobs.Assemble(m)
		if blob == nil {
			return o
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

// send decodes S_v at every active device's q ids and sends every device one
// M6; collect then sends S_v^resp at the fixed release.
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
	a.mu.Lock()
	r.sentAt = time.Now()
	a.mu.Unlock()
	a.cfg.Metrics.StageSeconds.WithLabelValues("vendor_decode").Observe(time.Since(start).Seconds())
	return true
}

// collect sends S_v^resp at the round's fixed release: the response deadline
// after S_v's commands went to the devices, never earlier (spec G7, O12).
// Releasing "as soon as every device answered" told every observer of the
// vendor's traffic, and the integrator receiving the table, whether a device
// had spent time executing a real command. The release depends only on when
// the integrator's S_v arrived, which the integrator knows anyway; a device
// that has not answered by then (off, or slower than the deadline) costs only
// its own slots, which stay random (O11).
func (a *VendorAgent) collect(ctx context.Context, t uint64, r *agentRound, msgs []jetstream.Msg) {
	d := &a.cfg.Deployment
	start := time.Now()
	fail := func(err error) {
		a.cfg.Log.Warn("response table failed", "t", t, "err", err)
	}
	a.mu.Lock()
	release := r.sentAt.Add(d.ResponseDeadline)
	a.mu.Unlock()
	tm := time.NewTimer(time.Until(release))
	select {
	case <-tm.C:
	case <-ctx.Done():
		tm.Stop()
		return
	}
	a.mu.Lock()
	r.released = true
	missing := len(r.vr.Active()) - len(r.answered)
	rt, capacity, err := r.vr.EncodeResponses(d.Quantum, rand.Reader)
	a.mu.Unlock()
	if missing > 0 {
		a.cfg.Metrics.Dropped.WithLabelValues("device_no_answer").Add(float64(missing))
	}
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
	// A device publishes only on its own subject (contract.DevicePermissions), so the
	// subject names the sender and its bucket; a flood costs a map lookup, nothing more.
	if ok && !a.limit.allow(di) {
		a.cfg.Metrics.Dropped.WithLabelValues("device_rate").Inc()
		return
	}
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
	if r.released {
		a.cfg.Metrics.Dropped.WithLabelValues("device_response_late").Inc()
		return
	}
	// Every device is active, so its active position is its index.
	if err := r.vr.AcceptResponse(di, m.Data); err != nil {
		a.cfg.Metrics.Dropped.WithLabelValues("device_response").Inc()
		return
	}
	r.answered[di] = true
	if !r.sentAt.IsZero() {
		a.cfg.Metrics.StageSeconds.WithLabelValues("device_answer").Observe(time.Since(r.sentAt).Seconds())
	}
}
