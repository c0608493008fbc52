// Package loisstatus is the operator's side of what the LOIS cloud interfaces report
// (services/pkg/lois/contract, docs/lois.md "HeaderGateway"): the device sessions they have
// installed, the live upload keystreams in their tables, the uploads they forwarded (each
// consuming one keystream) and the uploads they rejected by reason; and of what the server
// interfaces the operator runs report: the real and cover packets they recovered and hid
// (the pad ratio), their download keystreams and rejections. The figures are counts only: no
// id, address or key (the metrics carry none).
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
	MetricPool     = "lois_pool_keystreams"
	resultOK       = "ok"
	// The cover packets a receiver recovered and dropped, and a sender hid and sent (STP).
	resultPadDropped = "pad_dropped"
	resultPadSent    = "pad_sent"
	roleCloud        = "ci"
	roleServer       = "si"
)

// ErrNotReported means no cloud (or server) interface answered with LOIS figures.
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

// ServerReport is what the server interfaces (every service's, every replica) together
// report, counted since each started.
type ServerReport struct {
	// Replicas is the number of server interfaces that answered.
	Replicas int
	// Devices is the smallest session count over them.
	Devices int64
	// Uploads are the real uploads recovered (si, up, ok); Downloads the replies hidden and
	// sent (si, down, ok).
	Uploads, Downloads int64
	// CoverReceived are the cover uploads recovered and dropped (pad_dropped); CoverSent the
	// cover downloads sent (pad_sent).
	CoverReceived, CoverSent int64
	// DownloadKeystreams sums the unused download keystreams: each replica holds only its
	// partition (spec §3.11).
	DownloadKeystreams int64
	// Rejected sums the refused packets by "<dir>/<reason>".
	Rejected map[string]int64
}

// Packets is every packet the server interfaces handled: real and cover, both directions.
func (r *ServerReport) Packets() int64 {
	return r.Uploads + r.Downloads + r.CoverReceived + r.CoverSent
}

// PadRatio is the share of cover packets among Packets, and false before any packet.
func (r *ServerReport) PadRatio() (float64, bool) {
	n := r.Packets()
	if n == 0 {
		return 0, false
	}
	return float64(r.CoverReceived+r.CoverSent) / float64(n), true
}

// Source reads the cloud and server interfaces' figures from their metrics listeners.
type Source interface {
	Cloud(ctx context.Context, endpoints []string) (*Report, error)
	Server(ctx context.Context, endpoints []string) (*ServerReport, error)
}

// Metrics scrapes the replicas' /metrics over HTTP.
type Metrics struct {
	// Client makes the requests; nil uses a client with a 5 s timeout.
	Client *http.Client
}

// Cloud scrapes every endpoint and merges what they report. A replica that does not answer
// is skipped; if none answers, the error says why.
func (m Metrics) Cloud(ctx context.Context, endpoints []string) (*Report, error) {
	pages, err := m.pages(ctx, endpoints, "cloud")
	if err != nil {
		return nil, err
	}
	return Merge(pages)
}

// Server scrapes the server interfaces' endpoints and merges what they report, as Cloud.
func (m Metrics) Server(ctx context.Context, endpoints []string) (*ServerReport, error) {
	pages, err := m.pages(ctx, endpoints, "server")
	if err != nil {
		return nil, err
	}
	return MergeServers(pages)
}

// pages scrapes every endpoint, skipping those that do not answer; an error only when none
// does.
func (m Metrics) pages(ctx context.Context, endpoints []string, who string) ([]map[string]*dto.MetricFamily, error) {
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
		return nil, fmt.Errorf("scrape the %s interfaces' metrics: %w", who, errors.Join(errs...))
	}
	return pages, nil
}

// MergeServers combines the metric pages of server interfaces. A page without an SI's
// session gauge is not one (ErrNotReported when none is).
func MergeServers(pages []map[string]*dto.MetricFamily) (*ServerReport, error) {
	r := &ServerReport{Devices: -1}
	for _, fams := range pages {
		var sessions *dto.Metric
		for _, m := range fams[MetricSessions].GetMetric() {
			if label(m, "role") == roleServer {
				sessions = m
			}
		}
		if sessions == nil {
			continue
		}
		r.Replicas++
		if v := int64(value(sessions)); r.Devices < 0 || v < r.Devices {
			r.Devices = v
		}
		for _, m := range fams[MetricPool].GetMetric() {
			if label(m, "dir") == "down" {
				r.DownloadKeystreams += int64(value(m))
			}
		}
		for _, m := range fams[MetricPackets].GetMetric() {
			if label(m, "role") != roleServer {
				continue
			}
			v := int64(value(m))
			dir, res := label(m, "dir"), label(m, "result")
			switch {
			case dir == "up" && res == resultOK:
				r.Uploads += v
			case dir == "down" && res == resultOK:
				r.Downloads += v
			case dir == "up" && res == resultPadDropped:
				r.CoverReceived += v
			case dir == "down" && res == resultPadSent:
				r.CoverSent += v
			case v > 0:
				if r.Rejected == nil {
					r.Rejected = map[string]int64{}
				}
				r.Rejected[dir+"/"+res] += v
			}
		}
	}
	if r.Replicas == 0 {
		return nil, ErrNotReported
	}
	r.Devices = max(r.Devices, 0)
	return r, nil
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
			if label(m, "role") == roleCloud {
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
			if label(m, "role") != roleCloud || label(m, "dir") != "up" {
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
