package roles

import (
	"github.com/prometheus/client_golang/prometheus"
)

// BrokerMetrics are the broker's Prometheus metrics. Rejections are counted by stage and
// reason; per-pipeline gauges carry what the operator reports in the SecurePipeline's
// status (executions, last latency, AND gates, bytes). No label, value or device id is ever
// a metric label.
type BrokerMetrics struct {
	Setups      *prometheus.CounterVec   // type, outcome
	Rejected    *prometheus.CounterVec   // stage (setup|publish|function), reason
	Published   prometheus.Counter       // publish messages stored
	Revoked     prometheus.Counter       // subscribers revoked
	Functions   *prometheus.GaugeVec     // pipeline, status: 1 for the function's current status
	Executions  *prometheus.CounterVec   // pipeline, status (ok|insufficient|failed)
	Nullified   *prometheus.CounterVec   // pipeline, reason (pps.NullReason)
	Latency     *prometheus.HistogramVec // pipeline, phase (check|garble|evaluate|total)
	LastLatency *prometheus.GaugeVec     // pipeline: seconds of the last execution
	ANDGates    *prometheus.GaugeVec     // pipeline: AND gates of the last garbled circuit
	StreamBytes *prometheus.GaugeVec     // pipeline: bytes of the last garbled stream
	BytesTotal  *prometheus.CounterVec   // pipeline: garbled bytes evaluated
	Valid       *prometheus.GaugeVec     // pipeline: valid inputs of the last execution
	Leader      prometheus.Gauge         // 1 while this replica schedules
}

// NewBrokerMetrics registers the broker's metrics with reg (nil: unregistered, for tests).
func NewBrokerMetrics(reg prometheus.Registerer) *BrokerMetrics {
	ns := "obscura_pps_broker"
	m := &BrokerMetrics{
		Setups: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "setups_total",
			Help: "Device setup messages relayed to the garbler, by type and outcome."}, []string{"type", "outcome"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rejected_total",
			Help: "Messages and functions refused, by stage and reason."}, []string{"stage", "reason"}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "publishes_total",
			Help: "Publish messages whose labels were stored."}),
		Revoked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "revocations_total",
			Help: "Subscribers revoked (a new function key epoch each)."}),
		Functions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "functions",
			Help: "1 for each pipeline's function status (registered, refused, pending)."}, []string{"pipeline", "status"}),
		Executions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "executions_total",
			Help: "Executions by status (ok, insufficient, failed)."}, []string{"pipeline", "status"}),
		Nullified: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "nullified_slots_total",
			Help: "Input slots nullified, by reason."}, []string{"pipeline", "reason"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "execution_seconds",
			Help:    "Execution latency by phase (check, garble: request to header, evaluate: header to result while the stream arrives, total).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"pipeline", "phase"}),
		LastLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "last_execution_seconds",
			Help: "Total latency of the last execution."}, []string{"pipeline"}),
		ANDGates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "and_gates",
			Help: "AND gates of the pipeline's circuit."}, []string{"pipeline"}),
		StreamBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "last_stream_bytes",
			Help: "Bytes of the last garbled stream."}, []string{"pipeline"}),
		BytesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_bytes_total",
			Help: "Garbled bytes evaluated."}, []string{"pipeline"}),
		Valid: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "last_valid_inputs",
			Help: "Valid input slots of the last execution."}, []string{"pipeline"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "scheduler_leader",
			Help: "1 while this replica holds the scheduler lease."}),
	}
	if reg != nil {
		reg.MustRegister(m.Setups, m.Rejected, m.Published, m.Revoked, m.Functions, m.Executions, m.Nullified,
			m.Latency, m.LastLatency, m.ANDGates, m.StreamBytes, m.BytesTotal, m.Valid, m.Leader)
	}
	return m
}

// Rejection stages and reasons.
const (
	stageSetup    = "setup"
	stagePublish  = "publish"
	stageFunction = "function"

	reasonSubject        = "subject"
	reasonUndecodable    = "undecodable"
	reasonDeviceMismatch = "device_mismatch"
	reasonACL            = "acl"
	reasonGarbler        = "garbler_refused"
	reasonUnknownPub     = "unknown_publisher"
	reasonReplay         = "replay"
	reasonValueCount     = "value_count"
	reasonUnbound        = "not_in_pipeline"
	reasonHardened       = "hardened_unsupported"
	reasonCompile        = "compile"
	reasonHashMismatch   = "circuit_hash_mismatch"
	reasonIDMismatch     = "fnid_mismatch"
)
