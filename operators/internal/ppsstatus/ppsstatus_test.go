package ppsstatus

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// replica is a broker replica's metrics as the contract names them, served by the Prometheus
// client the services use.
type replica struct {
	reg                                           *prometheus.Registry
	fn, gates, bytes, last, round, valid, latency *prometheus.GaugeVec
	status                                        *prometheus.GaugeVec
	execs                                         *prometheus.CounterVec
}

func newReplica(t *testing.T) (*replica, string) {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry()}
	g := func(name string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, append([]string{contract.LabelPipeline}, labels...))
		r.reg.MustRegister(v)
		return v
	}
	r.fn = g(contract.MetricFunction, contract.LabelFn, contract.LabelCircuitHash)
	r.gates, r.bytes = g(contract.MetricANDGates), g(contract.MetricCircuitBytes)
	r.last, r.round, r.valid, r.latency = g(contract.MetricLastTime), g(contract.MetricLastRound), g(contract.MetricLastValid), g(contract.MetricLastLatency)
	r.status = g(contract.MetricLastStatus, contract.LabelStatus)
	r.execs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: contract.MetricExecutions, Help: "x"}, []string{contract.LabelPipeline, contract.LabelStatus})
	r.reg.MustRegister(r.execs)
	srv := httptest.NewServer(promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return r, strings.TrimPrefix(srv.URL, "http://")
}

func (r *replica) executed(p string, at time.Time, round, valid int, latency time.Duration, status string) {
	r.execs.WithLabelValues(p, status).Inc()
	r.last.WithLabelValues(p).Set(float64(at.UnixNano()) / 1e9)
	r.round.WithLabelValues(p).Set(float64(round))
	r.valid.WithLabelValues(p).Set(float64(valid))
	r.latency.WithLabelValues(p).Set(latency.Seconds())
	r.status.Reset()
	r.status.WithLabelValues(p, status).Set(1)
}

func TestMetricsMergesReplicas(t *testing.T) {
	const p, other = "city/parking", "city/other"
	a, aAddr := newReplica(t)
	b, bAddr := newReplica(t)
	for _, r := range []*replica{a, b} {
		r.fn.WithLabelValues(p, "0123456789abcdef0123456789abcdef", "feed").Set(1)
		r.gates.WithLabelValues(p).Set(1234567)
		r.bytes.WithLabelValues(p).Set(45e6)
	}
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	a.executed(p, t0, 7, 9, 80*time.Millisecond, contract.StatusOK)
	a.executed(p, t0.Add(time.Minute), 8, 8, 90*time.Millisecond, contract.StatusOK)
	b.executed(p, t0.Add(2*time.Minute), 9, 2, 10*time.Millisecond, contract.StatusInsufficient)
	// Another pipeline on the same replica must not leak into this one's figures.
	a.execs.WithLabelValues(other, contract.StatusOK).Add(100)

	r, err := Metrics{}.Pipeline(context.Background(), p, []string{aAddr, bAddr, "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.FnID != "0123456789abcdef0123456789abcdef" || r.CircuitHash != "feed" || r.ANDGates != 1234567 || r.CircuitBytes != 45e6 {
		t.Errorf("function figures %+v", r)
	}
	if r.Executions != 3 {
		t.Errorf("executions = %d, want 3 (2 on one replica, 1 on the other)", r.Executions)
	}
	want := Execution{Time: t0.Add(2 * time.Minute), Round: 9, ValidInputs: 2, Latency: 10 * time.Millisecond, Status: contract.StatusInsufficient}
	if r.Last == nil || *r.Last != want {
		t.Errorf("last = %+v, want the latest of both replicas %+v", r.Last, want)
	}
}

func TestMetricsNotReported(t *testing.T) {
	_, addr := newReplica(t)
	if _, err := (Metrics{}).Pipeline(context.Background(), "city/parking", []string{addr}); !errors.Is(err, ErrNotReported) {
		t.Errorf("err = %v, want ErrNotReported", err)
	}
	if _, err := (Metrics{}).Pipeline(context.Background(), "city/parking", nil); !errors.Is(err, ErrNotReported) {
		t.Errorf("no endpoints: err = %v, want ErrNotReported", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 500) }))
	defer srv.Close()
	_, err := (Metrics{}).Pipeline(context.Background(), "city/parking", []string{strings.TrimPrefix(srv.URL, "http://")})
	if err == nil || errors.Is(err, ErrNotReported) || !strings.Contains(err.Error(), "500") {
		t.Errorf("a failing replica: err = %v, want the scrape error", err)
	}
}
