package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/e2e/internal/podsd"
	"github.com/obscura-iot/obscura/e2e/internal/promrun"
	"github.com/obscura-iot/obscura/services/testenv"
)

// zeroByDesign lists the panels whose figures a clean run leaves at zero, each with its reason.
// Their series still exist: every role exports each reason of these counters at 0 from the
// start (services/pkg/mohito/roles.RejectedReasons and DroppedReasons, the coordinator's vendors,
// the PPS broker's publish reasons and each pipeline's nullification reasons, the LOIS DI's and
// SI's cover counters, as pda_proxy_rejected_total and sddr_mailbox_rejected_total always did),
// so checkDashboard asserts for them what it asserts for every panel: the query returns a series
// (the metric is present, at 0). Nothing is skipped: an entry only says why the value is 0.
var zeroByDesign = map[string]string{
	"mohito.json/Rejected users' messages by reason": "mohito drive sends only valid messages",
	"mohito.json/Shuffler choices skipped by vendor": "the one Vendor is always available: the coordinator never skips it",
	"mohito.json/Dropped messages by reason":         "a clean run drops no message",
	"pda.json/Proxy request rejections by reason":    "every participant request of the run is valid (the phase asserts 0 rejected)",
	"pps.json/Broker rejections by stage and reason": "the run's publishers send only valid, authorised inputs",
	"pps.json/Nullified input slots":                 "every publisher publishes every slot of the day and passes the consistency check",
	"lois.json/Cover traffic":                        "the HeaderGateway sample runs without stochastic traffic padding (STP is off unless configured)",
}

// dashboardRoles are the roles whose pods (podsd.LabelRole) must be scraped and up before a
// system's dashboard is checked: the ones its panels read.
var dashboardRoles = map[string][]string{
	"mohito.json": {"coordinator", "gateway", "decrypt-worker", "encoder", "responder", "shuffler"},
	"lois.json":   {"ci", "di", "si"},
	"sddr.json":   {"mailbox"},
	"pps.json":    {"broker", "garbler"},
	"pda.json":    {"proxy", "mixer", "oracle", "db-frontend", "db-shard"},
}

// monitor is a real Prometheus (bin/prometheus) on the node (issue 19 item 3, finding H-1),
// where every listener is on 127.0.0.1: it finds the pods of its namespaces through the file-SD
// writer (e2e/internal/podsd: the operator-run roles at the metrics address their address file
// publishes, the chart's pods by their prometheus.io annotations), refreshed every 2 s, plus the
// static targets a phase adds (the LOIS device and server interfaces the test runs itself).
// A phase starts one before its system's workload and stops it after checking the system's
// dashboard, so no Prometheus scrapes during the load phases the report measures.
type monitor struct {
	e       *env
	prom    *promrun.Server
	targets string
	ns      []string
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	last    []podsd.Group
	lastErr error
	static  []podsd.Group
}

// startMonitor starts the Prometheus and its target writer over namespaces.
func (e *env) startMonitor(namespaces ...string) *monitor {
	e.t.Helper()
	m := &monitor{e: e, ns: namespaces, done: make(chan struct{})}
	m.prom = promrun.Start(e.t, `global: {scrape_interval: 2s, scrape_timeout: 1500ms, evaluation_interval: 5s}
scrape_configs:
  - job_name: obscura-pods
    file_sd_configs: [{files: ["$DIR/targets.json"], refresh_interval: 5s}]
`)
	m.targets = filepath.Join(m.prom.Dir, "targets.json")
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	m.write(ctx)
	go func() {
		defer close(m.done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m.write(ctx)
			}
		}
	}()
	e.t.Cleanup(m.stop)
	return m
}

func (m *monitor) write(ctx context.Context) {
	g, err := podsd.Targets(ctx, m.e.k, filepath.Join(m.e.root, "hack/cluster/state/kubelet/root"), "", m.ns...)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		g = append(g, m.static...)
		err = podsd.Write(m.targets, g)
	}
	if err == nil {
		m.last = g
	}
	m.lastErr = err
}

// stop ends the writer and the Prometheus (idempotent).
func (m *monitor) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
	m.cancel = nil
	m.prom.Stop()
}

// addStatic adds a target the test runs outside a pod.
func (m *monitor) addStatic(g podsd.Group) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.static = append(m.static, g)
}

func (m *monitor) snapshot() ([]podsd.Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.lastErr
}

// waitUp waits until every target of system is up and the roles the dashboard reads are among
// them, and returns how many targets the system has.
func (m *monitor) waitUp(system string, roles []string) int {
	n := 0
	testenv.Eventually(m.e.t, 2*time.Minute, "every "+system+" pod scraped and up", func() error {
		last, err := m.snapshot()
		if err != nil {
			return err
		}
		var pods, have []string
		for _, g := range last {
			if g.Labels[podsd.LabelSystem] == system {
				pods = append(pods, g.Labels["pod"])
				have = append(have, g.Labels[podsd.LabelRole])
			}
		}
		for _, r := range roles {
			if !slices.Contains(have, r) {
				return fmt.Errorf("no %s target of role %s among %v", system, r, pods)
			}
		}
		for _, pod := range pods {
			q, err := m.prom.Query(fmt.Sprintf(`up{job="obscura-pods",pod=%q} == 1`, pod))
			if err != nil {
				return err
			}
			if q == 0 {
				return fmt.Errorf("pod %s: not scraped (or down)", pod)
			}
		}
		n = len(pods)
		return nil
	})
	return n
}

// checkDashboard checks one system's dashboard against the Prometheus while that system's
// workload runs (or has just run, its pods still up): the system's pods are targets and up,
// every query of every panel evaluates, and every panel returns a series within 3 minutes —
// those of zeroByDesign too (their series present at 0). The figures go to the report.
func (m *monitor) checkDashboard(system string) {
	e := m.e
	e.t.Helper()
	file := system + ".json"
	roles, ok := dashboardRoles[file]
	if !ok {
		e.t.Fatalf("no dashboardRoles entry for %s", file)
	}
	targets := m.waitUp(system, roles)
	panels := promrun.Panels(e.t, "1m", file)
	zero := 0
	for k := range zeroByDesign {
		f, title, _ := strings.Cut(k, "/")
		if f != file {
			continue
		}
		zero++
		if !slices.ContainsFunc(panels, func(p promrun.Panel) bool { return p.Title == title }) {
			e.t.Errorf("zeroByDesign entry %q names no panel of %s", k, file)
		}
	}
	start := time.Now()
	testenv.Eventually(e.t, 3*time.Minute, "every panel of "+file+" returns data", func() error {
		empty, err := m.prom.Empty(panels)
		if err == nil && len(empty) > 0 {
			err = errors.New("no data: " + strings.Join(empty, "; "))
		}
		return err
	})
	e.t.Logf("%s: %d panels returned data (%d of them zero by design, their series present) from %d %s targets, %.1fs after the check began",
		file, len(panels), zero, targets, system, time.Since(start).Seconds())
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("dashboard %s: all %d panels returned data from a Prometheus on the node (%d %s targets up; %d panels zero by design, their series present at 0)",
		file, len(panels), targets, system, zero))
}

// prometheusScrapesPods is the Mohito dashboard's check: while mohito drive sends commands
// through the edge, every Mohito pod of the release's namespace is a target that is up, the
// edge's Envoy stats are scraped, and every Mohito panel returns data.
func (e *env) prometheusScrapesPods() {
	m := e.startMonitor(e.ns)
	defer m.stop()

	// The driver's edge CA and device logins (the load phases set them too; smoke runs none).
	if e.ca == "" {
		e.ca = e.edgeCA()
	}
	if e.creds == "" {
		e.creds = e.deviceCredentials()
	}
	wait := e.driveInBackground("prometheus", 4, 100*time.Second)
	defer wait()

	// The edge's Envoy stats, from its health listener (finding E-1), found by its annotations.
	testenv.Eventually(e.t, 2*time.Minute, "the edge's Envoy stats scraped", func() error {
		n, err := m.prom.Query(`envoy_http_downstream_rq_total{job="obscura-pods",obscura_system="edge",envoy_http_conn_manager_prefix="edge"} > 0`)
		if err == nil && n == 0 {
			err = errors.New("no edge request counter yet")
		}
		return err
	})
	m.checkDashboard("mohito")
	n, _ := m.prom.Query(`up{job="obscura-pods"} == 1`)
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("prometheus on the node (Mohito phase): %d targets up", n))
}

// scrapeInNetns makes the observability server a LOIS role serves at addr inside namespace n
// (the device's and server's interfaces the test runs, lois_test.go) a target of m: a relay
// from a port of the node's loopback into the namespace, which the node's Prometheus scrapes.
func (m *monitor) scrapeInNetns(n loisNetns, addr, role string) {
	e := m.e
	e.t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	relayTCP(e, l, func() (u net.Conn, err error) {
		err = n.do(func() (err error) { u, err = net.DialTimeout("tcp4", addr, 5*time.Second); return err })
		return u, err
	})
	m.addStatic(podsd.Group{Targets: []string{l.Addr().String()}, Labels: map[string]string{
		"namespace": n.name, "pod": "lois-" + role, podsd.LabelSystem: "lois", podsd.LabelRole: role,
		podsd.LabelInstance: gatewayName, "__metrics_path__": "/metrics"}})
}
