package roles

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
)

// Oracle is the proxy's decryption oracle service (spec §4.2 proxy-oracle, A10): it
// answers the DB's reveal requests with the consistency check and audit-logs each request
// (window, entries, consistent), never the key or Y.
type Oracle struct {
	job *Job
	sec *ProxySecrets
	js  jetstream.JetStream
	log *slog.Logger
	m   *Metrics

	mu      sync.Mutex
	oracles map[uint64]*pda.Oracle
}

// NewOracle wires an oracle on the proxy account.
func NewOracle(job *Job, sec *ProxySecrets, js jetstream.JetStream, log *slog.Logger, m *Metrics) *Oracle {
	return &Oracle{job: job, sec: sec, js: js, log: log, m: m, oracles: map[uint64]*pda.Oracle{}}
}

func (o *Oracle) oracle(w uint64) (*pda.Oracle, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if x := o.oracles[w]; x != nil {
		return x, nil
	}
	s, err := o.job.Suite(w)
	if err != nil {
		return nil, err
	}
	p, err := pda.NewProxy(s, o.sec.Keys, nil)
	if err != nil {
		return nil, err
	}
	if len(o.oracles) > 16 {
		clear(o.oracles)
	}
	o.oracles[w] = p.Oracle()
	return o.oracles[w], nil
}

// Run consumes reveal requests until ctx ends.
func (o *Oracle) Run(ctx context.Context) error {
	return natsx.Consume(ctx, o.js, natsx.ConsumerSpec{Stream: contract.RevealReqStream, Durable: "oracle",
		Filters: []string{"pda.v1.reveal.req.*"}, Batch: 16, AckWait: time.Minute}, o.log, o.handle)
}

func (o *Oracle) handle(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	w, err := contract.WindowOf(m.Subject(), -1)
	shard := m.Headers().Get(contract.HdrShard)
	if err != nil || !contract.ValidShardID(shard) {
		o.m.Oracle.WithLabelValues("malformed").Inc()
		return natsx.Drop
	}
	x, err := o.oracle(w)
	if err != nil {
		return natsx.Drop
	}
	resp, st, err := x.Answer(m.Data())
	if err != nil {
		o.m.Oracle.WithLabelValues("refused").Inc()
		o.log.Warn("reveal request refused", "window", w, "entries", st.Entries, "err", err)
		return natsx.Drop
	}
	o.m.Oracle.WithLabelValues("answered").Inc()
	o.m.Consistent.Add(float64(st.Consistent))
	o.m.Inconsisent.Add(float64(st.Entries - st.Consistent))
	o.log.Info("reveal audit", "window", st.Window, "entries", st.Entries, "consistent", st.Consistent)
	id := hex.EncodeToString(m.Data()[11:27])
	if err := natsx.Publish(ctx, o.js, contract.RevealRespSubject(w, shard), "resp-"+id, resp, nil); err != nil {
		return natsx.Retry
	}
	return natsx.Ack
}

// String describes the oracle for logs.
func (o *Oracle) String() string { return fmt.Sprintf("pda oracle (%s)", o.job.DeploymentID) }
