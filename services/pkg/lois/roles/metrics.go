package roles

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
)

// Metrics are a LOIS role's Prometheus metrics (contract.Metric*). No id, address or key is
// ever a label.
type Metrics struct {
	Packets  *prometheus.CounterVec // role, dir, result
	Pool     *prometheus.GaugeVec   // dir (services summed: a service id is never a label)
	DVT      *prometheus.GaugeVec   // table (up|down)
	DVTBytes *prometheus.GaugeVec   // table
	GC       prometheus.Counter
	Cover    *prometheus.CounterVec // role: STP cover bytes sent
	Sessions *prometheus.GaugeVec   // role: device sessions installed (ci, si)
	// Replenishment (spec §3.12).
	EpochsRequested *prometheus.CounterVec // role (di, si), dir
	EpochsGranted   *prometheus.CounterVec // role (registrar, di, si), dir
	ExhaustQueued   *prometheus.CounterVec // role
	RekeysDue       *prometheus.CounterVec // role
}

// NewMetrics registers the metrics with reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Packets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricPackets,
			Help: "LOIS packets handled, by role, direction and result (ok or the rejection reason)."}, []string{"role", "dir", "result"}),
		Pool: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: contract.MetricPool,
			Help: "Unused keystreams a sender holds (every service summed), by direction."}, []string{"dir"}),
		DVT: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: contract.MetricDVT,
			Help: "Live entries of the receiver's dynamic Vacuum table."}, []string{"dir"}),
		DVTBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: contract.MetricDVTBytes,
			Help: "Bytes of the receiver's dynamic Vacuum table."}, []string{"dir"}),
		GC: prometheus.NewCounter(prometheus.CounterOpts{Name: contract.MetricGC,
			Help: "Keystream entries collected unconsumed at expiry."}),
		Cover: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricCover,
			Help: "Stochastic traffic padding: cover bytes sent (IP length before hiding)."}, []string{"role"}),
		Sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: contract.MetricSessions,
			Help: "Device sessions whose keystreams this role has installed."}, []string{"role"}),
		EpochsRequested: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricEpochsRequested,
			Help: "Keystream epochs asked for: EPOCH_REQ sent by a DI, low-water events published by an SI."}, []string{"role", "dir"}),
		EpochsGranted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricEpochsGranted,
			Help: "Keystream epochs granted (registrar) or activated (DI, SI) after every receiver installed them."}, []string{"role", "dir"}),
		ExhaustQueued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricExhaustQueued,
			Help: "Packets held while their pool was empty, waiting for a grant (sent when it comes, else dropped as exhausted)."}, []string{"role"}),
		RekeysDue: prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricRekeysDue,
			Help: "Epoch grants refused because the session's seed reached its age or keystream limit (a new HELLO is needed)."}, []string{"role"}),
	}
	if reg != nil {
		reg.MustRegister(m.Packets, m.Pool, m.DVT, m.DVTBytes, m.GC, m.Cover, m.Sessions,
			m.EpochsRequested, m.EpochsGranted, m.ExhaustQueued, m.RekeysDue)
	}
	return m
}

// counters are one role's and direction's counters, one per result, created up front so
// that every reason shows (at 0) and the hot path does no label lookup.
type counters map[string]prometheus.Counter

func (m *Metrics) counters(role, dir string) counters {
	c := counters{}
	for _, r := range contract.Results {
		c[r] = m.Packets.WithLabelValues(role, dir, r)
	}
	return c
}

func (c counters) inc(result string) { c[result].Inc() }
