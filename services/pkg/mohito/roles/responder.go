package roles

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// Responder assembles r′ from every vendor's decoder into M9 for V*, and
// routes V*'s M10 to the user mailboxes (spec R3–R5, O13).
type Responder struct {
	cfg    WorkerConfig
	mu     sync.Mutex
	rounds map[uint64]*respRound
	blobs  *natsx.BlobAssembler
	OnDone func(t uint64, k int) // called once every response of round t is in a mailbox
}

type respRound struct {
	plan   *plan
	msgs   []jetstream.Msg
	layers map[int][]byte
	sent   bool
	routed int
	first  time.Time
}

// NewResponder returns the responder.
func NewResponder(cfg WorkerConfig) *Responder {
	return &Responder{cfg: cfg, rounds: map[uint64]*respRound{}, blobs: natsx.NewBlobAssembler()}
}

// Run consumes plans, r′ blobs and M10.
func (r *Responder) Run(ctx context.Context) error {
	return natsx.ConsumeAll(ctx, r.cfg.JS, r.cfg.Log,
		natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.StreamIntegratorIn, Durable: contract.ConsumerRouter, Filters: []string{contract.FromVendors(contract.KindRespOut)}, AckWait: r.cfg.ackWait()}, Handler: r.route},
		natsx.Consumer{Spec: natsx.ConsumerSpec{Stream: contract.StreamWork, Durable: contract.ConsumerResponder, Filters: []string{contract.WorkPlans, contract.WorkLayers}, AckWait: r.cfg.ackWait(), ReleaseOnStop: true, Pending: r.cfg.Metrics.pending(contract.ConsumerResponder)}, Handler: r.collect})
}

func (r *Responder) round(t uint64) *respRound {
	rr := r.rounds[t]
	if rr == nil {
		rr = &respRound{layers: map[int][]byte{}, first: time.Now()}
		r.rounds[t] = rr
		for k, old := range r.rounds {
			if time.Since(old.first) > staleAfter {
				delete(r.rounds, k)
			}
		}
	}
	return rr
}

func (r *Responder) collect(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	if md, err := m.Metadata(); err == nil && time.Since(md.Timestamp) > staleAfter {
		return natsx.Drop
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.round(p.T)
	if rr.sent {
		return natsx.Ack
	}
	switch p.Kind {
	case contract.KindPlan:
		pl, err := parsePlan(m.Data())
		if err != nil {
			return natsx.Drop
		}
		rr.plan = pl
		rr.msgs = append(rr.msgs, m)
	case contract.KindLayerShare:
		blob, msgs, o := r.blobs.Assemble(m)
		if blob == nil {
			return o
		}
		rr.layers[p.Vendor] = blob
		rr.msgs = append(rr.msgs, msgs...)
	default:
		return natsx.Drop
	}
	if rr.plan == nil || len(rr.layers) < r.cfg.Deployment.Params.Vendors {
		return natsx.Hold
	}
	if err := r.sendLayer(ctx, rr); err != nil {
		r.cfg.Log.Warn("M9 not sent, will retry", "t", p.T, "err", err)
		for _, mm := range rr.msgs {
			_ = mm.NakWithDelay(500 * time.Millisecond)
		}
		rr.msgs = nil
		rr.layers = map[int][]byte{}
		return natsx.Hold
	}
	for _, mm := range rr.msgs {
		_ = mm.DoubleAck(ctx)
	}
	rr.msgs, rr.layers, rr.sent = nil, nil, true
	return natsx.Hold
}

func (r *Responder) sendLayer(ctx context.Context, rr *respRound) error {
	d := &r.cfg.Deployment
	pl := rr.plan
	layer := make([][]byte, pl.N)
	for _, b := range rr.layers {
		if err := parseLayer(d.Params, b, layer); err != nil {
			return err
		}
	}
	for i := range layer {
		if layer[i] == nil {
			// A position whose inner layer did not open: random r′ (G1).
			v, err := mohito.VoidResponseLayer(d.Params, nil)
			if err != nil {
				return err
			}
			layer[i] = v
		}
	}
	for s := 0; s < pl.N; s += d.OutBatch {
		e := min(s+d.OutBatch, pl.N)
		m9, err := mohito.MarshalResponseLayer(d.Params, pl.T, s, layer[s:e])
		if err != nil {
			return err
		}
		if err := natsx.Publish(ctx, r.cfg.JS, contract.ToVendor(int(pl.Shuffler), pl.T, contract.KindRespLayer), fmt.Sprintf("m9-%d-%d", pl.T, s), m9, nil); err != nil {
			return err
		}
	}
	return nil
}

// route writes each r_i into its user's mailbox; the user is looked up by
// index in Redis, never derived from anything V* sent.
func (r *Responder) route(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	d := &r.cfg.Deployment
	start, vals, err := mohito.ParseResponseOut(d.Params, p.T, m.Data(), mohito.MaxRoundMessages)
	if err != nil {
		r.cfg.Metrics.Dropped.WithLabelValues("bad_m10").Inc()
		return natsx.Drop
	}
	// One read of the batch's users and one write of its mailboxes (not two round trips per
	// response).
	users, err := r.cfg.Store.Users(ctx, p.T, uint32(start), len(vals))
	if err != nil {
		return natsx.Retry
	}
	mail := make([]roundstate.Mail, 0, len(vals))
	for i, v := range vals {
		if users[i] == "" {
			continue
		}
		idx := uint32(start + i)
		m11, err := mohito.MarshalUserResponse(d.Params, p.T, idx, v)
		if err != nil {
			return natsx.Drop
		}
		mail = append(mail, roundstate.Mail{User: users[i], Index: idx, M11: m11})
	}
	if err := r.cfg.Store.PutResponses(ctx, p.T, mail); err != nil {
		return natsx.Retry
	}
	r.cfg.Metrics.Commands.WithLabelValues("responses").Add(float64(len(vals)))
	r.mu.Lock()
	rr := r.round(p.T)
	rr.routed += len(vals)
	k := -1
	if rr.plan != nil {
		k = rr.plan.K
	}
	fire := k >= 0 && rr.routed == k
	r.mu.Unlock()
	if fire {
		_ = r.cfg.Store.SetStatus(ctx, p.T, roundstate.StatusDone)
		AnnounceRelease(r.cfg.JS.Conn(), p.T, roundstate.StatusDone) // the gateways answer parked Fetches
		if r.OnDone != nil {
			r.OnDone(p.T, k)
		}
	}
	return natsx.Ack
}
