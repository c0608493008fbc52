// Package ppsstatus is the operator's side of what the PPS broker reports about a pipeline
// (services/pkg/pps/contract status.go, docs/pps.md "SecurePipeline"): the compiled
// function's id, circuit hash and size, and each execution. The broker exposes them as
// Prometheus metrics on every replica's metrics port, labelled by pipeline; a Source reads
// them for the reconciler, which writes them into the SecurePipeline's status.
//
// Source is the interface the reconciler depends on; Metrics is the implementation that
// scrapes the broker pods. The metrics hold counts, sizes, rounds and times only: nothing the
// spec hides from the operator (§5.4).
package ppsstatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/obscura-iot/obscura/operators/internal/scrape"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

// ErrNotReported means no broker replica reports the pipeline yet (not started, or not
// compiled the function yet).
var ErrNotReported = errors.New("not reported by the PPS broker yet")

// Report is what the broker replicas together report about one pipeline.
type Report struct {
	// FnID and CircuitHash identify the compiled function; empty until compiled.
	FnID, CircuitHash string
	// ANDGates and CircuitBytes size one garbled circuit.
	ANDGates, CircuitBytes int64
	// Executions counts finished executions over every replica and status.
	Executions int64
	// Last is the latest execution of any replica; nil before the first.
	Last *Execution
}

// Execution is one finished execution.
type Execution struct {
	Time        time.Time
	Round       int64
	ValidInputs int64
	Latency     time.Duration
	Status      string
}

// Source reads what the broker reports about pipeline ("namespace/name") from the broker
// replicas at endpoints (host:port of each replica's metrics listener).
type Source interface {
	Pipeline(ctx context.Context, pipeline string, endpoints []string) (*Report, error)
}

// Metrics scrapes the replicas' /metrics over HTTP.
type Metrics struct {
	// Client makes the requests; nil uses a client with a 5 s timeout.
	Client *http.Client
}

// Pipeline scrapes every endpoint and merges what they report. A replica that does not
// answer is skipped (it may be starting or gone); if none answers, the error says why.
func (m Metrics) Pipeline(ctx context.Context, pipeline string, endpoints []string) (*Report, error) {
	c := m.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	var pages []map[string]*dto.MetricFamily
	var errs []error
	for _, ep := range endpoints {
		fams, err := scrape.Metrics(ctx, c, ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pages = append(pages, fams)
	}
	if len(pages) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("scrape the broker's metrics: %w", errors.Join(errs...))
	}
	return Merge(pipeline, pages)
}

// Merge combines the metric pages of the broker replicas for one pipeline: counters are
// added, the function and circuit come from any replica that compiled it, and the last
// execution is the latest one.
func Merge(pipeline string, pages []map[string]*dto.MetricFamily) (*Report, error) {
	r := &Report{}
	seen := false
	for _, fams := range pages {
		samples := func(name string) []*dto.Metric {
			f := fams[name]
			if f == nil {
				return nil
			}
			var out []*dto.Metric
			for _, m := range f.GetMetric() {
				if label(m, contract.LabelPipeline) == pipeline {
					out = append(out, m)
				}
			}
			return out
		}
		one := func(name string) (float64, bool) {
			ms := samples(name)
			if len(ms) == 0 {
				return 0, false
			}
			return value(ms[0]), true
		}
		for _, m := range samples(contract.MetricFunction) {
			if value(m) == 1 {
				r.FnID, r.CircuitHash, seen = label(m, contract.LabelFn), label(m, contract.LabelCircuitHash), true
			}
		}
		if v, ok := one(contract.MetricANDGates); ok {
			r.ANDGates, seen = int64(v), true
		}
		if v, ok := one(contract.MetricCircuitBytes); ok {
			r.CircuitBytes, seen = int64(v), true
		}
		for _, m := range samples(contract.MetricExecutions) {
			r.Executions += int64(value(m))
			seen = true
		}
		ts, ok := one(contract.MetricLastTime)
		if !ok || ts <= 0 {
			continue
		}
		at := time.Unix(0, int64(ts*1e9)).UTC()
		if r.Last != nil && !at.After(r.Last.Time) {
			continue
		}
		e := &Execution{Time: at}
		if v, ok := one(contract.MetricLastRound); ok {
			e.Round = int64(v)
		}
		if v, ok := one(contract.MetricLastValid); ok {
			e.ValidInputs = int64(v)
		}
		if v, ok := one(contract.MetricLastLatency); ok {
			e.Latency = time.Duration(v * float64(time.Second))
		}
		for _, m := range samples(contract.MetricLastStatus) {
			if value(m) == 1 {
				e.Status = label(m, contract.LabelStatus)
			}
		}
		r.Last = e
	}
	if !seen {
		return nil, ErrNotReported
	}
	return r, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Endpoint is host:port of a replica's metrics listener.
func Endpoint(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
