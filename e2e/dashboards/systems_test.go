package dashboards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/obscura-iot/obscura/e2e/internal/promrun"
	loissim "github.com/obscura-iot/obscura/services/pkg/lois/sim"
	pdasim "github.com/obscura-iot/obscura/services/pkg/pda/sim"
	ppssim "github.com/obscura-iot/obscura/services/pkg/pps/sim"
	"github.com/obscura-iot/obscura/services/pkg/sddr"
	sddrclient "github.com/obscura-iot/obscura/services/pkg/sddr/client"
	sddrroles "github.com/obscura-iot/obscura/services/pkg/sddr/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// systemNoData lists the panels of the PDA, PPS, LOIS and SDDR dashboards that a clean demo run
// cannot fill, each with its reason (as noData). None: the counters a clean run leaves at 0
// (PPS broker rejections and nullified slots, LOIS cover traffic without STP, PDA proxy and SDDR
// mailbox rejections) are exported at 0 from the start, so their panels return a series too.
var systemNoData = map[string]string{}

// system is one system's demo, run as the load of its dashboard.
type system struct {
	dashboard string
	run       func(t *testing.T, ctx context.Context, reg prometheus.Registerer) error
}

var systems = []system{
	{"pda.json", func(t *testing.T, ctx context.Context, reg prometheus.Registerer) error {
		s, err := pdasim.RunDemo(ctx, pdasim.DemoOptions{Participants: 4, Threshold: 2, Benign: 10, Shards: 2, Registerer: reg}, io.Discard)
		if err == nil && !s.Exact() {
			err = fmt.Errorf("pda demo: revealed %v, want %v", s.Revealed, s.Expected)
		}
		return err
	}},
	{"pps.json", func(t *testing.T, ctx context.Context, reg prometheus.Registerer) error {
		o := ppssim.DefaultDemoOptions()
		o.Registerer = reg
		_, err := ppssim.RunDemo(ctx, o, io.Discard)
		return err
	}},
	{"lois.json", func(t *testing.T, ctx context.Context, reg prometheus.Registerer) error {
		o := loissim.DefaultDemoOptions()
		o.Registerer, o.Hold = reg, 3*time.Second
		_, err := loissim.RunDemo(ctx, o, io.Discard)
		return err
	}},
	{"sddr.json", runMailbox},
}

// runMailbox is SDDR's load: a real encounter mailbox (sddr/roles) on a real redis-server, two
// devices exchanging sealed messages through it over HTTP, one of them over its rate limit and
// one put too large.
func runMailbox(t *testing.T, ctx context.Context, reg prometheus.Registerer) error {
	rdb := testenv.StartRedis(t).Client()
	mb, err := sddrroles.NewMailbox(sddrroles.MailboxOptions{Redis: rdb, TTL: time.Hour, Rate: 0.01, Burst: 8, Registerer: reg})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mb.Serve(sctx, l) }()
	defer func() { stop(); <-done }()
	var id sddr.EncounterID
	id[0] = 7
	sk := [sddr.KeySize]byte{9}
	a, err := sddrclient.New(id, sk, 0)
	if err != nil {
		return err
	}
	b, err := sddrclient.New(id, sk, 1)
	if err != nil {
		return err
	}
	url := "http://" + l.Addr().String()
	ca := &sddrclient.Client{BaseURL: url, Token: "dashboards-alice"}
	cb := &sddrclient.Client{BaseURL: url, Token: "dashboards-bob"}
	if err := ca.Send(ctx, a, []byte("hello")); err != nil {
		return fmt.Errorf("alice sends: %w", err)
	}
	if got, err := cb.Receive(ctx, b); err != nil || len(got) != 1 {
		return fmt.Errorf("bob receives %d messages: %v", len(got), err)
	}
	var se *sddrclient.StatusError
	if err := ca.Put(ctx, a.Address, make([]byte, sddrclient.MaxSealed+1)); !errors.As(err, &se) {
		return fmt.Errorf("a too-large put: %v; want a refusal", err)
	}
	limited := false
	for range 16 {
		_, err := cb.Receive(ctx, b)
		if errors.As(err, &se) {
			limited = true
			break
		}
		if err != nil {
			return err
		}
	}
	if !limited {
		return errors.New("bob was never rate-limited")
	}
	return nil
}

// TestSystemDashboardsReturnData (issue 19 item 3): each of the PDA, PPS, LOIS and SDDR dashboards
// against a real Prometheus (bin/prometheus) scraping that system's roles while its demo runs
// them (services/pkg/{pda,pps,lois}/sim.RunDemo: PDA's proxy, mixer, DB front-end, shards and
// oracle over an embedded NATS; PPS's broker and garbler over mutual TLS with publishers and a
// subscriber over MQTT; LOIS's DI, CI and SI exchanging packets; SDDR's mailbox, runMailbox),
// each system's metrics on its
// own 127.0.0.1 endpoint: every panel outside systemNoData must return a series.
func TestSystemDashboardsReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the PDA, PPS and LOIS demos and Prometheus")
	}
	regs := make([]*prometheus.Registry, len(systems))
	var cfg strings.Builder
	cfg.WriteString("global: {scrape_interval: 200ms, scrape_timeout: 150ms, evaluation_interval: 1s}\nscrape_configs:\n")
	for i, s := range systems {
		regs[i] = prometheus.NewRegistry()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(regs[i], promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", strings.TrimSuffix(s.dashboard, ".json"), l.Addr().String())
	}
	prom := promrun.Start(t, cfg.String())

	for i, s := range systems {
		panels := promrun.Panels(t, "1m", s.dashboard)
		for _, p := range panels {
			for _, e := range p.Exprs {
				if _, err := prom.Query(e); err != nil {
					t.Errorf("%s / %q: query %q: %v", p.File, p.Title, e, err)
				}
			}
		}
		var want []promrun.Panel
		for _, p := range panels {
			if systemNoData[p.File+"/"+p.Title] == "" {
				want = append(want, p)
			}
		}
		// The demo is the load; the panels must fill while it runs or within a bounded
		// wait after it ends (its counters and gauges stay on the endpoint).
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		err := s.run(t, ctx, regs[i])
		cancel()
		if err != nil {
			t.Fatalf("%s: demo: %v", s.dashboard, err)
		}
		testenv.Eventually(t, time.Minute, s.dashboard+": every panel returns data", func() error {
			empty, err := prom.Empty(want)
			if err == nil && len(empty) > 0 {
				err = errors.New("no data: " + strings.Join(empty, "; "))
			}
			return err
		})
		t.Logf("%s: %d panels, %d returned data, %d allow-listed without data", s.dashboard, len(panels), len(want), len(panels)-len(want))
	}
	for k := range systemNoData {
		file, title, _ := strings.Cut(k, "/")
		found := false
		for _, s := range systems {
			for _, p := range promrun.Panels(t, "1m", s.dashboard) {
				found = found || (p.File == file && p.Title == title)
			}
		}
		if !found {
			t.Errorf("systemNoData entry %q names no panel", k)
		}
	}
}
