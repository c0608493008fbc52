package roles

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// Publish rejection errors, each counted under its reason.
var (
	errBrokerValueCount = errors.New("pps broker: publish carries another number of values than the device's topics")
	errBrokerUnbound    = errors.New("pps broker: publisher is bound to no pipeline")
	errBrokerPayload    = errors.New("pps broker: publish lacks the labels or masked values its pipelines' modes need")
)

// checkPublish decodes a message of pps.pub.<id> and checks it against the device's bound
// topics: the publisher id, the decoded message, or the rejection reason with its error.
func (s *brokerSet) checkPublish(subject string, data []byte) (string, *contract.Publish, string, error) {
	id, err := contract.ParsePubSubject(subject)
	if err != nil {
		return "", nil, reasonSubject, err
	}
	p, err := contract.DecodePublish(data)
	if err != nil {
		return id, nil, reasonUndecodable, err
	}
	topics := s.topics[id]
	if len(topics) == 0 {
		return id, nil, reasonUnbound, errBrokerUnbound
	}
	if (s.labels[id] && len(p.Labels) == 0) || (s.masked[id] && len(p.Masked) == 0) {
		return id, nil, reasonPayloadMode, errBrokerPayload
	}
	if p.Values() != len(topics) {
		return id, nil, reasonValueCount, fmt.Errorf("%w: %d values, %d topics", errBrokerValueCount, p.Values(), len(topics))
	}
	return id, p, "", nil
}

// handleLabels is the publish ingest (spec §8.3): a message from an unknown publisher, a
// replayed round (round ≤ the last one, §10 #8), a wrong value count or a malformed message
// is rejected and counted by reason; otherwise its labels (faithful pipelines) and masked
// values (hardened pipelines, D21) are stored by (publisher, round)
// for as long as the pipelines may read them, and the message is acked once they are.
func (b *Broker) handleLabels(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	set := b.current()
	id, p, reason, err := set.checkPublish(m.Subject(), m.Data())
	if err != nil {
		b.m.Rejected.WithLabelValues(stagePublish, reason).Inc()
		return natsx.Drop
	}
	now := b.clk.Now()
	// Only what a pipeline reads is kept: labels for faithful pipelines, the 4-byte masked
	// values for hardened ones (D21).
	var labels, masked []byte
	if set.labels[id] {
		labels = p.Labels
	}
	if set.masked[id] {
		masked = p.Masked
	}
	switch err := b.store.StoreRound(ctx, id, p.Round, labels, masked, now); {
	case errors.Is(err, ErrUnknownPublisher):
		b.m.Rejected.WithLabelValues(stagePublish, reasonUnknownPub).Inc()
		return natsx.Drop
	case errors.Is(err, ErrReplay):
		b.m.Rejected.WithLabelValues(stagePublish, reasonReplay).Inc()
		return natsx.Drop
	case err != nil:
		b.log.Warn("store labels, retrying", "err", err)
		return natsx.Retry
	}
	b.m.Published.Inc()
	if b.opt.WindowCheck && labels != nil {
		b.win.enqueue(windowArrival{pub: id, round: p.Round, labels: slices.Clone(labels), at: now})
	}
	if b.opt.Pregarble && labels != nil {
		// A window is open: garble its execution ahead (a no-op once its tables are held).
		for _, f := range set.fns {
			b.pregarble(ctx, f)
		}
	}
	return natsx.Ack
}
