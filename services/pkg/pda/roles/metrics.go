package roles

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of every PDA role. Labels are reasons and outcomes only: no keys, no blinded
// keys, no participant identities (T-PRIV-11).
type Metrics struct {
	Items       *prometheus.CounterVec // proxy: items by outcome (accepted or a reason code, lower-cased)
	Rejected    *prometheus.CounterVec // proxy: requests refused (not 200), by reason (ProxyReasons)
	Sessions    prometheus.Counter
	Sealed      prometheus.Counter     // mixer: windows sealed
	Mixed       prometheus.Counter     // mixer: items forwarded
	Late        prometheus.Counter     // mixer: pool items after the seal point
	Opened      *prometheus.CounterVec // front-end: items by outcome
	Entries     *prometheus.CounterVec // shard: entries new | duplicate | misrouted
	Reveals     *prometheus.CounterVec // shard: requests sent | settled | stale
	Oracle      *prometheus.CounterVec // oracle: answered | refused | malformed
	Consistent  prometheus.Counter     // oracle: consistent entries
	Inconsisent prometheus.Counter     // oracle: inconsistent entries
	Results     prometheus.Counter     // shard: result documents written
}

// NewMetrics registers the PDA metrics on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Items:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_proxy_items_total", Help: "Submitted items by outcome."}, []string{"outcome"}),
		Rejected:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_proxy_rejected_total", Help: "Participant requests the proxy ingress refused (HTTP 400, 403, 409, 503 or a failed TLS handshake), by reason."}, []string{"reason"}),
		Sessions:    prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_proxy_sessions_total", Help: "Participant sessions opened."}),
		Sealed:      prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_mixer_windows_sealed_total", Help: "Windows sealed and forwarded."}),
		Mixed:       prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_mixer_items_total", Help: "Items shuffled and forwarded to the DB."}),
		Late:        prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_mixer_late_items_total", Help: "Pool items that arrived after the seal point."}),
		Opened:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_frontend_items_total", Help: "Items opened by outcome."}, []string{"outcome"}),
		Entries:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_shard_entries_total", Help: "Entries by outcome."}, []string{"outcome"}),
		Reveals:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_shard_reveals_total", Help: "Reveal requests by outcome."}, []string{"outcome"}),
		Oracle:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pda_oracle_requests_total", Help: "Oracle requests by outcome."}, []string{"outcome"}),
		Consistent:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_oracle_consistent_entries_total", Help: "Entries found consistent."}),
		Inconsisent: prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_oracle_inconsistent_entries_total", Help: "Entries found inconsistent (T-MAL-1)."}),
		Results:     prometheus.NewCounter(prometheus.CounterOpts{Name: "pda_shard_results_total", Help: "Shard result documents written."}),
	}
	if reg != nil {
		reg.MustRegister(m.Items, m.Rejected, m.Sessions, m.Sealed, m.Mixed, m.Late, m.Opened, m.Entries, m.Reveals, m.Oracle, m.Consistent, m.Inconsisent, m.Results)
	}
	for _, r := range ProxyReasons {
		m.Rejected.WithLabelValues(r) // every reason is exported from the start, at 0
	}
	return m
}

// Reasons of pda_proxy_rejected_total: why the ingress refused a participant's request as a
// whole (docs/pda.md). Items refused inside an accepted request are counted in
// pda_proxy_items_total by their own reason (contract.Reason*, lower-cased).
const (
	RejectTLSHandshake       = "tls_handshake"       // no, an expired or an untrusted client certificate
	RejectUnknownParticipant = "unknown_participant" // 403: certificate CN not on --participants
	RejectBadWindow          = "bad_window"          // 400: ?window= is not a number
	RejectBadSession         = "bad_session"         // 400: ?session= is not a session id
	RejectUnknownSession     = "unknown_session"     // 403: no such session, or another participant's
	RejectBadBody            = "bad_body"            // 400: body not 1..max-batch submissions of the window's size
	RejectWindowClosed       = "window_closed"       // 409: the window is closed, sealed or not open yet
	RejectUnavailable        = "unavailable"         // 503: Redis, the window bucket or the pool failed
)

// itemOutcome is the pda_proxy_items_total label of an item refused for reason (a contract
// reason code, upper-case on the wire): lower snake_case like every reason label.
func itemOutcome(reason string) string { return strings.ToLower(reason) }

// ProxyReasons lists every reason of pda_proxy_rejected_total.
var ProxyReasons = []string{RejectTLSHandshake, RejectUnknownParticipant, RejectBadWindow, RejectBadSession,
	RejectUnknownSession, RejectBadBody, RejectWindowClosed, RejectUnavailable}
