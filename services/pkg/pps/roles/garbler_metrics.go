package roles

import "github.com/prometheus/client_golang/prometheus"

// garblerMetrics are the garbler's Prometheus metrics. Labels are outcomes and reasons only:
// no device, publisher or function id, no round, nothing derived from a secret.
type garblerMetrics struct {
	setups     *prometheus.CounterVec // type (hello|sub), outcome (ok|refused|malformed|error)
	rejections *prometheus.CounterVec // reason
	functions  prometheus.Counter
	revokes    prometheus.Counter
	checks     prometheus.Counter
	psiElems   prometheus.Counter
	erased     prometheus.Counter
	executions *prometheus.CounterVec // outcome (ok|cancelled|error)
	ands       prometheus.Counter
	bytes      prometheus.Counter
	garbleSecs prometheus.Histogram
	released   prometheus.Counter
	retained   prometheus.Counter
	conflicts  prometheus.Counter
	otSessions prometheus.Gauge
	ots        prometheus.Counter
	// The KKRT consistency check (D16b).
	kkrtSessions  prometheus.Gauge
	kkrtSetups    prometheus.Counter
	kkrtEnded     *prometheus.CounterVec // reason (expired|evicted|dropped)
	kkrtPositions prometheus.Counter
}

func newGarblerMetrics(reg prometheus.Registerer) *garblerMetrics {
	m := &garblerMetrics{
		setups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_garbler_setups_total",
			Help: "Relayed device setup messages by type and outcome."}, []string{"type", "outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_garbler_rejected_total",
			Help: "Requests refused, by reason."}, []string{"reason"}),
		functions: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_functions_registered_total",
			Help: "RegisterFunction calls that succeeded."}),
		revokes: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_revocations_total",
			Help: "Subscribers revoked (each starts a new function key epoch)."}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_consistency_checks_total",
			Help: "Consistency checks answered."}),
		psiElems: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_psi_elements_total",
			Help: "Blinded labels evaluated in consistency checks."}),
		erased: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_erased_slots_total",
			Help: "Slots nullified because their round seed was erased (or their policy refused the function)."}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_garbler_executions_total",
			Help: "Garble calls by outcome."}, []string{"outcome"}),
		ands: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_and_gates_total",
			Help: "AND gates garbled."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_stream_bytes_total",
			Help: "Garbled stream bytes sent."}),
		garbleSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pps_garbler_garble_seconds",
			Help: "Time to garble and stream one execution.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_released_seeds_total",
			Help: "Retained round seeds erased on Release."}),
		retained: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_retained_seeds_total",
			Help: "Round seeds retained (sealed, with a TTL) for rounds the broker may still request."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_state_conflicts_total",
			Help: "Ratchet writes retried because another replica wrote first (compare-and-set)."}),
		otSessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pps_garbler_ot_sessions",
			Help: "OT-extension sender sessions held in memory (hardened mode H1)."}),
		ots: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_ots_total",
			Help: "Correlated OTs answered for hardened-mode input labels."}),
		kkrtSessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pps_garbler_kkrt_sessions",
			Help: "KKRT consistency-check sessions held in memory."}),
		kkrtSetups: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_kkrt_setups_total",
			Help: "KKRT consistency-check sessions set up."}),
		kkrtEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pps_garbler_kkrt_sessions_ended_total",
			Help: "KKRT sessions dropped, by reason: expired (idle), evicted (table full), dropped (a batch out of order)."}, []string{"reason"}),
		kkrtPositions: prometheus.NewCounter(prometheus.CounterOpts{Name: "pps_garbler_kkrt_positions_total",
			Help: "Positions answered in KKRT consistency checks."}),
	}
	if reg != nil {
		reg.MustRegister(m.setups, m.rejections, m.functions, m.revokes, m.checks, m.psiElems, m.erased,
			m.executions, m.ands, m.bytes, m.garbleSecs, m.released, m.retained, m.conflicts,
			m.otSessions, m.ots, m.kkrtSessions, m.kkrtSetups, m.kkrtEnded, m.kkrtPositions)
	}
	return m
}
