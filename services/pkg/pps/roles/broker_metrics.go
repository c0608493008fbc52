package roles

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// BrokerMetrics are the broker's Prometheus metrics. The per-pipeline ones the operator
// reads into the SecurePipeline's status carry the names and labels of package contract
// (status.go); rejections are counted by stage and reason. No label, value, mask or device id
// is ever a metric label. The function id of pps_broker_function_info (label fn) is no secret:
// it is derived from the pipeline owner's own program (dsl.Function.ID, a hash of the canonical
// source), the operator publishes it in status.fnID and names it in every subscriber's NATS
// permissions (pps.fn.<fnid>.out).
type BrokerMetrics struct {
	Setups    *prometheus.CounterVec // type, outcome
	Rejected  *prometheus.CounterVec // stage (setup|publish|function), reason
	Published prometheus.Counter     // publish messages stored
	Revoked   prometheus.Counter     // subscribers revoked
	Functions *prometheus.GaugeVec   // pipeline, status: 1 for the function's current state
	Nullified *prometheus.CounterVec // pipeline, reason (pps.NullReason)
	Latency   *prometheus.HistogramVec
	// CheckPositions counts the label positions checked for consistency, by phase: "window"
	// (during the collection window, broker_window.go) or "tick".
	CheckPositions *prometheus.CounterVec // pipeline, phase
	Leader         prometheus.Gauge       // 1 while this replica schedules

	// The contract's status metrics (contract.Metric*).
	FunctionInfo *prometheus.GaugeVec   // pipeline, fn, circuit_hash
	ANDGates     *prometheus.GaugeVec   // pipeline
	CircuitBytes *prometheus.GaugeVec   // pipeline: bytes of the last garbled stream
	Executions   *prometheus.CounterVec // pipeline, status
	LastTime     *prometheus.GaugeVec   // pipeline
	LastRound    *prometheus.GaugeVec   // pipeline
	LastValid    *prometheus.GaugeVec   // pipeline
	LastLatency  *prometheus.GaugeVec   // pipeline: window end to published output
	LastStatus   *prometheus.GaugeVec   // pipeline, status
}

// NewBrokerMetrics registers the broker's metrics with reg (nil: unregistered, for tests).
func NewBrokerMetrics(reg prometheus.Registerer) *BrokerMetrics {
	pl := []string{contract.LabelPipeline}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append(slices.Clone(pl), labels...))
	}
	m := &BrokerMetrics{
		Setups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_broker_setups_total",
			Help: "Device setup messages relayed to the garbler, by type and outcome."}, []string{"type", "outcome"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_broker_rejected_total",
			Help: "Messages and functions refused, by stage and reason."}, []string{"stage", "reason"}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_broker_publishes_total",
			Help: "Publish messages whose labels were stored."}),
		Revoked: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_broker_revocations_total",
			Help: "Subscribers revoked (a new function key epoch each)."}),
		Functions: gauge("pps_broker_function_state", "1 for the pipeline's function state (pending, registered, refused).", "state"),
		Nullified: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_broker_nullified_slots_total",
			Help: "Input slots nullified, by reason."}, append(slices.Clone(pl), "reason")),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pps_broker_execution_phase_seconds",
			Help:    "Execution phases: check (consistency, at the tick), window_check (one batch of labels checked as they arrived), garble (request to header), evaluate (header to result, while the stream arrives), total (window end to published output).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, append(slices.Clone(pl), "phase")),
		CheckPositions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_broker_check_positions_total",
			Help: "Label positions checked for consistency, by phase: window (as publishes arrive) or tick."}, append(slices.Clone(pl), "phase")),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pps_broker_scheduler_leader",
			Help: "1 while this replica holds the scheduler lease."}),

		FunctionInfo: gauge(contract.MetricFunction, "1 for the pipeline's compiled function.", contract.LabelFn, contract.LabelCircuitHash),
		ANDGates:     gauge(contract.MetricANDGates, "AND gates of the pipeline's circuit."),
		CircuitBytes: gauge(contract.MetricCircuitBytes, "Bytes of one garbled circuit as streamed (the last one)."),
		Executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricExecutions,
			Help: "Finished executions by status."}, append(slices.Clone(pl), contract.LabelStatus)),
		LastTime:    gauge(contract.MetricLastTime, "Unix time the last execution finished."),
		LastRound:   gauge(contract.MetricLastRound, "Function round of the last execution."),
		LastValid:   gauge(contract.MetricLastValid, "Valid inputs of the last execution."),
		LastLatency: gauge(contract.MetricLastLatency, "Latency of the last execution, window end to published output."),
		LastStatus:  gauge(contract.MetricLastStatus, "1 for the status of the last execution.", contract.LabelStatus),
	}
	if reg != nil {
		reg.MustRegister(m.Setups, m.Rejected, m.Published, m.Revoked, m.Functions, m.Nullified, m.Latency, m.CheckPositions, m.Leader,
			m.FunctionInfo, m.ANDGates, m.CircuitBytes, m.Executions, m.LastTime, m.LastRound, m.LastValid,
			m.LastLatency, m.LastStatus)
	}
	// The publish stage's reasons are exported from the start, at 0 (as pda_proxy_rejected_total
	// and sddr_mailbox_rejected_total): a clean run's "Broker rejections" panel shows zeros, not
	// "no data", and an alert's rate has a series to start from.
	for _, r := range publishReasons {
		m.Rejected.WithLabelValues(stagePublish, r)
	}
	return m
}

// publishReasons are the reasons of pps_broker_rejected_total{stage="publish"} (checkPublish
// and handleLabels).
var publishReasons = []string{reasonSubject, reasonUndecodable, reasonUnbound, reasonPayloadMode, reasonValueCount,
	reasonUnknownPub, reasonReplay}

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
	reasonPayloadMode    = "payload_mode"
	reasonCompile        = "compile"
	reasonHashMismatch   = "circuit_hash_mismatch"
	reasonIDMismatch     = "fnid_mismatch"
)
