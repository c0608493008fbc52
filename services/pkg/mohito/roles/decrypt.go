package roles

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
)

// DecryptWorker is Stage A (spec §4.5): stateless, any number of replicas
// share one durable pull consumer, and each M4 message is one contiguous
// range of output positions — positions are already unlinkable to users, so
// partitioning by position is safe.
type DecryptWorker struct {
	cfg    WorkerConfig
	rounds *roundInfos // who V* is (M4 must come from it) and which key epoch the round names

	mu    sync.Mutex
	integ map[*mohito.PrivateKey]*mohito.Integrator
}

// NewDecryptWorker returns a Stage A worker.
func NewDecryptWorker(ctx context.Context, cfg WorkerConfig) (*DecryptWorker, error) {
	if cfg.Keys == nil || cfg.Keys.Len() == 0 {
		return nil, errors.New("decrypt worker: no integrator key")
	}
	if cfg.Keys.Suite() != cfg.Deployment.Params.Suite {
		return nil, fmt.Errorf("decrypt worker: %v keys for a %v deployment", cfg.Keys.Suite(), cfg.Deployment.Params.Suite)
	}
	rounds, err := openRoundInfos(ctx, cfg.JS)
	if err != nil {
		return nil, err
	}
	return &DecryptWorker{cfg: cfg, rounds: rounds, integ: map[*mohito.PrivateKey]*mohito.Integrator{}}, nil
}

// integrator returns Stage A for the key of round ri's integrator epoch. A
// round naming an epoch this worker does not hold is an error the caller
// retries: another replica (a newer pod) may hold it.
func (w *DecryptWorker) integrator(ri *mohito.RoundInfo) (*mohito.Integrator, error) {
	k, err := w.cfg.Keys.KeyFor(ri.IntegratorEpoch, ri.IntegratorKey)
	if err != nil {
		return nil, fmt.Errorf("round %d: %w", ri.T, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.integ[k]
	if in == nil {
		if in, err = mohito.NewIntegrator(w.cfg.Deployment.Params, k); err != nil {
			return nil, err
		}
		if len(w.integ) > 2*mohito.MaxKeyEpochs {
			clear(w.integ)
		}
		w.integ[k] = in
	}
	return in, nil
}

// Run consumes until ctx ends.
func (w *DecryptWorker) Run(ctx context.Context) error {
	return natsx.Consume(ctx, w.cfg.JS, natsx.ConsumerSpec{
		Stream: contract.StreamIntegratorIn, Durable: contract.ConsumerDecryptWorkers, Filters: []string{contract.FromVendors(contract.KindShuffled)},
		AckWait: w.cfg.ackWait(), Batch: 4, MaxAck: 64, Pending: w.cfg.Metrics.pending(contract.ConsumerDecryptWorkers),
	}, w.cfg.Log, w.handle)
}

func (w *DecryptWorker) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	start := time.Now()
	p, err := contract.ParseSubject(m.Subject())
	if err != nil {
		return natsx.Drop
	}
	ri, fresh, err := w.rounds.get(ctx, p.T)
	if err != nil {
		return natsx.Retry
	}
	if fresh {
		if dropped := w.cfg.Keys.Observe(p.T, ri.IntegratorEpoch); len(dropped) > 0 {
			w.cfg.Log.Info("integrator key epochs retired", "epochs", dropped, "round", p.T)
			w.mu.Lock()
			clear(w.integ) // no reference to a retired key stays
			w.mu.Unlock()
		}
	}
	if int(ri.Shuffler) != p.Vendor {
		w.cfg.Metrics.Dropped.WithLabelValues("not_shuffler").Inc()
		return natsx.Drop
	}
	data := m.Data()
	batchStart, ok := mohito.BatchStart(data)
	if !ok {
		return natsx.Drop
	}
	integ, err := w.integrator(ri)
	if err != nil {
		w.cfg.Metrics.Dropped.WithLabelValues("key_epoch").Inc()
		w.cfg.Log.Error("cannot decrypt round: key epoch not held", "t", p.T, "epoch", ri.IntegratorEpoch, "held", w.cfg.Keys.Epochs(), "err", err)
		return natsx.Retry
	}
	cmds, void, err := integ.OpenShuffled(p.T, data, mohito.MaxRoundMessages, nil)
	if err != nil {
		w.cfg.Metrics.Dropped.WithLabelValues("bad_m4").Inc()
		return natsx.Drop
	}
	byVendor, _ := mohito.GroupByVendor(cmds, w.cfg.Deployment.Params.Vendors)
	// Stage B: one record message per vendor per batch, even empty, so each
	// encoder knows when it has every batch of the round.
	for v, vc := range byVendor {
		id := fmt.Sprintf("part-%d-%d-%d", p.T, batchStart, v)
		if err := natsx.Publish(ctx, w.cfg.JS, contract.WorkPart(p.T, v), id, marshalPart(w.cfg.Deployment.Params, batchStart, vc), nil); err != nil {
			return natsx.Retry
		}
	}
	w.cfg.Metrics.Commands.WithLabelValues("decrypted").Add(float64(len(cmds) - void))
	if void > 0 {
		w.cfg.Metrics.Rejected.WithLabelValues("undecryptable_inner").Add(float64(void))
	}
	w.cfg.Metrics.StageSeconds.WithLabelValues("decrypt_batch").Observe(time.Since(start).Seconds())
	return natsx.Ack
}
