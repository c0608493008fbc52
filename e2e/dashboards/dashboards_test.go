// Package dashboards checks the chart's Grafana dashboards (charts/obscura/dashboards,
// docs/metrics.md "Dashboards") against a real Prometheus server scraping real Obscura roles.
package dashboards

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/obscura-iot/obscura/e2e/internal/promrun"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// noData lists the panels that cannot have data in this test's setup, each with its reason:
// a whole dashboard as "<file>", one panel as "<file>/<panel title>". Their queries must
// still parse and evaluate. The rejection, drop and skip counters are not here: every role
// exports each of their reasons (each vendor) at 0 from the start, so those panels return a
// series in a clean run too (at 0).
var noData = map[string]string{
	"pda.json":                          "no PDA role runs in this test: TestSystemDashboardsReturnData checks it against the PDA demo",
	"pps.json":                          "no PPS broker or garbler runs in this test: TestSystemDashboardsReturnData checks it against the PPS demo",
	"lois.json":                         "no LOIS DI, CI or SI runs in this test: TestSystemDashboardsReturnData checks it against the LOIS demo",
	"sddr.json":                         "no SDDR mailbox runs in this test: TestSystemDashboardsReturnData checks it against a real mailbox",
	"mohito.json/Key reloads by result": "the sim hands its roles their keys in process: no key reloader runs",
}

type panel = promrun.Panel

// TestDashboardPanelsReturnData (issue 19 item 3): a real Prometheus server (bin/prometheus,
// built by hack/tools.sh from the same module as promtool) scrapes a running Mohito sim cluster
// (coordinator, shufflers, encoders, decrypt workers, responder, vendors, gateways, devices over
// a real nats-server and redis-server) every 200 ms; every panel query of every dashboard must
// parse and evaluate through /api/v1/query, and every panel not in noData must return a series.
func TestDashboardPanelsReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server, redis-server, a Mohito cluster and Prometheus")
	}
	panels := promrun.Panels(t, "1m")
	for k := range noData {
		file, title, _ := strings.Cut(k, "/")
		if !slices.ContainsFunc(panels, func(p panel) bool { return p.File == file && (title == "" || p.Title == title) }) {
			t.Errorf("noData entry %q names no dashboard or panel", k)
		}
	}
	checkDocumented(t, panels)

	// The metrics source: the Mohito sim cluster, every role registering into one registry.
	reg := prometheus.NewRegistry()
	devices := []int{2, 2}
	pw := func(user string) string { return user + "-dashboards-pw" }
	nats := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(sim.DeviceIDs(devices), pw)), testenv.WithMQTT())
	rdb := testenv.StartRedis(t).Client()
	c, err := sim.Start(t.Context(), sim.Config{
		Deployment:       sim.SmallDeployment(devices, 256, 250*time.Millisecond),
		DevicesPerVendor: devices,
		Users:            4,
		Gateways:         2,
		DecryptWorkers:   1,
		NATSURL:          nats.URL(),
		Password:         pw,
		Store:            roundstate.NewRedis(rdb, 5*time.Minute),
		AckWait:          2 * time.Second,
		Registry:         reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		sim.Workload{PayloadSize: 16}.Run(t.Context(), c, stop)
	}()
	defer func() { close(stop); <-loadDone }()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	// The Prometheus server, scraping that endpoint.
	prom := promrun.Start(t, fmt.Sprintf(`global: {scrape_interval: 200ms, scrape_timeout: 150ms, evaluation_interval: 1s}
scrape_configs:
  - job_name: mohito-sim
    static_configs: [{targets: [%q]}]
`, l.Addr().String()))
	query := prom.Query

	// Every query must parse and evaluate (this also waits for the server to answer).
	for _, p := range panels {
		for _, e := range p.Exprs {
			if _, err := query(e); err != nil {
				t.Errorf("%s / %q: query %q: %v", p.File, p.Title, e, err)
			}
		}
	}
	if t.Failed() {
		return
	}

	// Every panel outside noData gets data while the load runs: at least one of its queries
	// returns a series. Bounded wait; on timeout Eventually names the empty panels.
	var want []panel
	for _, p := range panels {
		if noData[p.File] == "" && noData[p.File+"/"+p.Title] == "" {
			want = append(want, p)
		}
	}
	testenv.Eventually(t, 3*time.Minute, "every panel returns data", func() error {
		empty, err := prom.Empty(want)
		if err == nil && len(empty) > 0 {
			err = errors.New("no data: " + strings.Join(empty, "; "))
		}
		return err
	})
	t.Logf("%d panels evaluated, %d returned data, %d allow-listed without data", len(panels), len(want), len(panels)-len(want))
}

// metricRe matches the Obscura metric names in a PromQL expression.
var metricRe = regexp.MustCompile(`\b(?:mohito|pda|pps|lois|sddr|obscura)_[a-z0-9_]+\b`)

// checkDocumented fails for every panel that queries a metric docs/metrics.md does not document
// (a row "| `name` |" of its table; histogram series by their base name), or groups by a label
// its privacy review does not clear (checkGrouping).
func checkDocumented(t *testing.T, panels []panel) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := docRows(string(doc))
	for _, p := range panels {
		for _, e := range p.Exprs {
			for _, m := range metricRe.FindAllString(e, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(m, suf); ok && strings.HasSuffix(b, "_seconds") {
						base = b
					}
				}
				if !strings.Contains(string(doc), "| `"+base+"` |") {
					t.Errorf("%s / %q queries %s, which docs/metrics.md does not document", p.File, p.Title, m)
				}
			}
			checkGrouping(t, p, e, rows)
		}
	}
}

// docRow is one metric's row of docs/metrics.md: its labels (backquoted in the Labels column)
// and its privacy review.
type docRow struct {
	labels  []string
	privacy string
}

var (
	backquoted = regexp.MustCompile("`([a-z_]+)`")
	byRe       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

func docRows(doc string) map[string]docRow {
	rows := map[string]docRow{}
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 9 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var r docRow
		for _, m := range backquoted.FindAllStringSubmatch(cells[3], -1) {
			r.labels = append(r.labels, m[1])
		}
		r.privacy = strings.TrimSpace(cells[len(cells)-2])
		rows[name] = r
	}
	return rows
}

// checkGrouping fails for a grouping label (by/without) that no queried metric documents, and
// for any queried metric whose privacy review is not ok: a panel may split only by labels the
// privacy review cleared (le: a histogram's buckets).
func checkGrouping(t *testing.T, p panel, expr string, rows map[string]docRow) {
	t.Helper()
	var queried []docRow
	for _, m := range metricRe.FindAllString(expr, -1) {
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(m, suf); ok && strings.HasSuffix(b, "_seconds") {
				m = b
			}
		}
		r, ok := rows[m]
		if !ok {
			continue // reported by checkDocumented
		}
		if !strings.HasPrefix(r.privacy, "ok") {
			t.Errorf("%s / %q queries %s, whose privacy review is %q", p.File, p.Title, m, r.privacy)
		}
		queried = append(queried, r)
	}
	for _, g := range byRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			l = strings.TrimSpace(l)
			if l == "" || l == "le" {
				continue
			}
			if !slices.ContainsFunc(queried, func(r docRow) bool { return slices.Contains(r.labels, l) }) {
				t.Errorf("%s / %q groups by %q, which no queried metric's row in docs/metrics.md lists", p.File, p.Title, l)
			}
		}
	}
}
