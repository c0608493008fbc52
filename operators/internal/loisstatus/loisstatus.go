// Package loisstatus is the operator's side of what the LOIS cloud interfaces report
// (services/pkg/lois/contract, docs/lois.md "HeaderGateway"): the device sessions they have
// installed, the live upload keystreams in their tables, the uploads they forwarded (each
// consuming one keystream) and the uploads they rejected by reason. The figures are counts
// only: no id, address or key (the metrics carry none).
package loisstatus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/obscura-iot/obscura/operators/internal/scrape"
)

// Metric names and labels of services/pkg/lois/contract (the operators may not import it: it
// links the protocol core).
const (
	MetricPackets  = "lois_packets_total"
	MetricDVT      = "lois_dvt_entries"
	MetricSessions = "lois_sessions_installed"
	resultOK       = "ok"
)

// ErrNotReported means no cloud interface answered with LOIS figures.
var ErrNotReported = errors.New("not reported by the LOIS cloud interfaces yet")

// Report is what the cloud interface replicas together report.
type Report struct {
	// Replicas is the number of replicas that answered.
	Replicas int
	// Devices is the smallest session count over the replicas (a session counts once every
	// replica that answered has installed it).
	Devices int64
	// Installed is the largest count of live upload entries over the replicas.
	Installed int64
	// Consumed sums the uploads forwarded (result ok) over the replicas.
	Consumed int64
	// Rejected sums the rejected uploads by reason over the replicas.
	Rejected map[string]int64
}

// Source reads the cloud interfaces' figures from the replicas' metrics listeners.
type Source interface {
	Cloud(ctx context.Context, endpoints []string) (*Report, error)
}

// Metrics scrapes the replicas' /metrics over HTTP.
type Metrics struct {
	// Client makes the requests; nil uses a client with a 5 s timeout.
	Client *http.Client
}

// Cloud scrapes every endpoint and merges what they report. A replica that does not answer
// is skipped; if none answers, the error says why.
func (m Metrics) Cloud(ctx context.Context, endpoints []string) (*Report, error) {
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
		return nil, fmt.Errorf("scrape the cloud interfaces' metrics: %w", errors.Join(errs...))
	}
	return Merge(pages)
}

// Merge combines the metric pages of the cloud interface replicas.
func Merge(pages []map[string]*dto.MetricFamily) (*Report, error) {
	r := &Report{Devices: -1}
	for _, fams := range pages {
		f := fams[MetricSessions]
		if f == nil {
			continue // not a LOIS cloud interface (or an older one)
		}
		r.Replicas++
		for _, m := range f.GetMetric() {
			if label(m, "role") == "ci" {
				v := int64(value(m))
				if r.Devices < 0 || v < r.Devices {
					r.Devices = v
				}
			}
		}
		for _, m := range fams[MetricDVT].GetMetric() {
			if label(m, "dir") == "up" {
				r.Installed = max(r.Installed, int64(value(m)))
			}
		}
		for _, m := range fams[MetricPackets].GetMetric() {
			if label(m, "role") != "ci" || label(m, "dir") != "up" {
				continue
			}
			v := int64(value(m))
			switch res := label(m, "result"); res {
			case resultOK:
				r.Consumed += v
			default:
				if v > 0 {
					if r.Rejected == nil {
						r.Rejected = map[string]int64{}
					}
					r.Rejected[res] += v
				}
			}
		}
	}
	if r.Replicas == 0 {
		return nil, ErrNotReported
	}
	r.Devices = max(r.Devices, 0)
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
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}
