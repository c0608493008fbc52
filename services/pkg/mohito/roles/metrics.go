package roles

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus series of every role (a role registers the
// whole set; unused series stay at zero). Bursts are a security metric
// (spec G5): alert when they become frequent.
type Metrics struct {
	Rounds       *prometheus.CounterVec // by outcome: done, aborted
	Commands     *prometheus.CounterVec // by stage: admitted, rejected, decrypted, delivered, responses
	Fakes        prometheus.Counter
	Bursts       prometheus.Counter // counted by the coordinator, once per planned round with S > 0
	BurstExcess  prometheus.Counter
	StageSeconds *prometheus.HistogramVec // by stage
	// RoundSeconds observes each completed round from its close to its release (every
	// response in a mailbox), at the coordinator; RoundPeriod is the round period T.
	RoundSeconds prometheus.Histogram
	// RoundWork observes each completed round's work: close to release less the vendors'
	// fixed response deadline (what grows with load; RoundSeconds is at least the deadline).
	RoundWork   prometheus.Histogram
	RoundPeriod prometheus.Gauge
	// CapacityRatio is the series' capacity class as a ratio to base (coordinator; 1 without classes).
	CapacityRatio prometheus.Gauge
	// ShufflerBursts counts the rounds a shuffler saw a burst in (its own view; the
	// coordinator's Bursts is the once-per-round count).
	ShufflerBursts prometheus.Counter
	// ConsumerPending is the undelivered backlog of a work queue (JetStream consumer), set
	// after every fetch by the role consuming it.
	ConsumerPending *prometheus.GaugeVec   // by consumer
	Dropped         *prometheus.CounterVec // by reason: bad input from the network
	// Rejected counts users' messages refused by the protocol's checks, by
	// reason (docs/services.md lists them).
	Rejected *prometheus.CounterVec
	// ShufflerSkips counts rounds whose V* choice passed a vendor by as
	// unavailable (spec O4), by vendor index.
	ShufflerSkips *prometheus.CounterVec

	KeyEpoch      prometheus.Gauge       // the role's current (active) key epoch
	KeyEpochsHeld prometheus.Gauge       // epochs held, staged included
	KeyReloads    *prometheus.CounterVec // by result: ok, failed

	GatewayCalls   *prometheus.CounterVec // user-API calls by method and gRPC code
	GatewayWaiting prometheus.Gauge       // Fetch calls parked until their round is released
}

// NewMetrics registers the series on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Rounds:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_rounds_total", Help: "Rounds by outcome."}, []string{"outcome"}),
		Commands:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_commands_total", Help: "Commands by stage."}, []string{"stage"}),
		Fakes:           prometheus.NewCounter(prometheus.CounterOpts{Name: "mohito_fakes_total", Help: "Fake commands added by shufflers."}),
		Bursts:          prometheus.NewCounter(prometheus.CounterOpts{Name: "mohito_burst_rounds_total", Help: "Rounds with a burst (S > 0), a security metric."}),
		BurstExcess:     prometheus.NewCounter(prometheus.CounterOpts{Name: "mohito_burst_excess_total", Help: "Sum of burst excess S."}),
		StageSeconds:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mohito_stage_seconds", Help: "Stage latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"stage"}),
		RoundSeconds:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mohito_round_duration_seconds", Help: "Completed rounds from close to release (every response in a mailbox).", Buckets: prometheus.ExponentialBuckets(0.25, 2, 10)}),
		RoundWork:       prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mohito_round_work_seconds", Help: "Completed rounds' work: close to release less the vendors' fixed response deadline (shuffler exchange, decryption, encoding, responder).", Buckets: prometheus.ExponentialBuckets(0.025, 2, 12)}),
		RoundPeriod:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "mohito_round_period_seconds", Help: "The round period T (0 outside the coordinator)."}),
		CapacityRatio:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "mohito_capacity_class_ratio", Help: "The series' capacity class as a multiple of the vendors' base (coordinator; 1 without capacity classes, 0 in the other roles)."}),
		ShufflerBursts:  prometheus.NewCounter(prometheus.CounterOpts{Name: "mohito_shuffler_burst_rounds_total", Help: "Rounds this shuffler saw a burst (S > 0) in."}),
		ConsumerPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mohito_consumer_pending_messages", Help: "Messages a JetStream work-queue consumer has not been delivered yet."}, []string{"consumer"}),
		Dropped:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_dropped_total", Help: "Messages dropped as invalid or stale."}, []string{"reason"}),
		Rejected:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_rejected_total", Help: "Users' messages refused by the protocol's checks, by reason."}, []string{"reason"}),
		ShufflerSkips:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_shuffler_skipped_total", Help: "Shuffler choices that passed a vendor by as unavailable, by vendor index."}, []string{"vendor"}),

		KeyEpoch:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "mohito_key_epoch", Help: "The role's current key epoch (the one new rounds name)."}),
		KeyEpochsHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mohito_key_epochs_held", Help: "Key epochs held, staged ones included."}),
		KeyReloads:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_key_reloads_total", Help: "Re-reads of the key source by result."}, []string{"result"}),

		GatewayCalls:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mohito_gateway_calls_total", Help: "User-API calls by method and gRPC code."}, []string{"method", "code"}),
		GatewayWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mohito_gateway_waiting_fetches", Help: "Fetch calls held until their round is released."}),
	}
	if reg != nil {
		reg.MustRegister(m.Rounds, m.Commands, m.Fakes, m.Bursts, m.BurstExcess, m.StageSeconds, m.RoundSeconds, m.RoundWork, m.RoundPeriod, m.CapacityRatio, m.ShufflerBursts, m.ConsumerPending, m.Dropped, m.Rejected, m.ShufflerSkips, m.KeyEpoch, m.KeyEpochsHeld, m.KeyReloads, m.GatewayCalls, m.GatewayWaiting)
	}
	// Every reason is exported from the start, at 0 (as pda_proxy_rejected_total): a clean
	// run's "Rejected" and "Dropped" panels show zeros, not "no data", and an alert's rate
	// has a series to start from. Every role exports the whole set (the unused stay at 0).
	for _, r := range RejectedReasons {
		m.Rejected.WithLabelValues(r)
	}
	for _, r := range DroppedReasons {
		m.Dropped.WithLabelValues(r)
	}
	return m
}

// RejectedReasons are the reasons of mohito_rejected_total (docs/services.md): the gateway's
// (unauthenticated, malformed, round_closed, quota, duplicate_envelope), the shuffler's
// (undecryptable_outer, replayed_envelope, share_check), the decrypt workers'
// (undecryptable_inner) and the encoder's (duplicate_z).
var RejectedReasons = []string{"unauthenticated", "malformed", "round_closed", "quota", "duplicate_envelope",
	"undecryptable_outer", "replayed_envelope", "share_check", "undecryptable_inner", "duplicate_z"}

// DroppedReasons are the reasons of mohito_dropped_total: bad or stale input from the network,
// by the role that drops it.
var DroppedReasons = []string{"subject", "stale", "unknown_round", "bad_m2", "bad_m4", "bad_m10", "bad_blob",
	"bad_response_table", "no_slots", "not_shuffler", "key_epoch", "key_set", "device_rate", "device_no_answer",
	"device_response", "device_response_late"}

// pending returns a natsx.ConsumerSpec.Pending setting the backlog of consumer.
func (m *Metrics) pending(consumer string) func(uint64) {
	if m == nil {
		return nil
	}
	g := m.ConsumerPending.WithLabelValues(consumer)
	return func(n uint64) { g.Set(float64(n)) }
}
