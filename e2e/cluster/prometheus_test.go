package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/e2e/internal/podsd"
	"github.com/obscura-iot/obscura/e2e/internal/promrun"
	"github.com/obscura-iot/obscura/services/testenv"
)

// clusterNoData lists the Mohito panels that cannot have data in this run, each with its reason
// (as e2e/dashboards' noData).
var clusterNoData = map[string]string{
	"mohito.json/Rejected users' messages by reason": "mohito drive sends only valid messages: no rejection series exists",
	"mohito.json/Shuffler choices skipped by vendor": "the one Vendor is always available: the coordinator never skips it",
	"mohito.json/Dropped messages by reason":         "a clean run drops no message: no series exists",
}

// prometheusScrapesPods (issue 19 item 3, finding H-1): a real Prometheus (bin/prometheus) runs
// on the node, where every listener is on 127.0.0.1, and finds the pods through the file-SD
// writer (e2e/internal/podsd: the operator-run roles at the metrics address their address file
// publishes, the chart's pods by their prometheus.io annotations), refreshed every 2 s. While
// mohito drive sends commands through the edge, every query of every Mohito panel must evaluate
// and every panel outside clusterNoData must return a series; every operator-run pod of the
// release's namespace must be a target that is up, and the edge's Envoy stats must be scraped.
func (e *env) prometheusScrapesPods() {
	kubeletRoot := filepath.Join(e.root, "hack/cluster/state/kubelet/root")
	prom := promrun.Start(e.t, `global: {scrape_interval: 2s, scrape_timeout: 1500ms, evaluation_interval: 5s}
scrape_configs:
  - job_name: obscura-pods
    file_sd_configs: [{files: ["$DIR/targets.json"], refresh_interval: 5s}]
`)
	targets := filepath.Join(prom.Dir, "targets.json")
	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	var (
		mu      sync.Mutex
		lastErr error
		last    []podsd.Group
	)
	write := func() {
		g, err := podsd.Targets(ctx, e.k, kubeletRoot, "", e.ns)
		if err == nil {
			err = podsd.Write(targets, g)
		}
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			last = g
		}
		lastErr = err
	}
	snapshot := func() ([]podsd.Group, error) {
		mu.Lock()
		defer mu.Unlock()
		return last, lastErr
	}
	write()
	go func() {
		defer close(writerDone)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				write()
			}
		}
	}()
	defer func() { cancel(); <-writerDone }()

	// The driver's edge CA and device logins (the load phases set them too; smoke runs none).
	if e.ca == "" {
		e.ca = e.edgeCA()
	}
	if e.creds == "" {
		e.creds = e.deviceCredentials()
	}
	wait := e.driveInBackground("prometheus", 4, 100*time.Second)
	defer wait()

	panels := promrun.Panels(e.t, "1m", "mohito.json")
	for k := range clusterNoData {
		_, title, _ := strings.Cut(k, "/")
		if !slices.ContainsFunc(panels, func(p promrun.Panel) bool { return p.Title == title }) {
			e.t.Errorf("clusterNoData entry %q names no Mohito panel", k)
		}
	}
	var want []promrun.Panel
	for _, p := range panels {
		if clusterNoData[p.File+"/"+p.Title] == "" {
			want = append(want, p)
		}
	}
	// Every operator-run pod of the namespace is a target, and up.
	testenv.Eventually(e.t, 2*time.Minute, "every pod of the namespace scraped", func() error {
		last, err := snapshot()
		if err != nil {
			return err
		}
		var pods []string
		for _, g := range last {
			if g.Labels[podsd.LabelSystem] == "mohito" {
				pods = append(pods, g.Labels["pod"])
			}
		}
		if len(pods) < 6 {
			return fmt.Errorf("only %d Mohito pods in the targets: %v", len(pods), pods)
		}
		for _, pod := range pods {
			n, err := prom.Query(fmt.Sprintf(`up{job="obscura-pods",pod=%q} == 1`, pod))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("pod %s: not scraped (or down)", pod)
			}
		}
		return nil
	})
	// The edge's Envoy stats, from its health listener (finding E-1), found by its annotations.
	testenv.Eventually(e.t, time.Minute, "the edge's Envoy stats scraped", func() error {
		n, err := prom.Query(`envoy_http_downstream_rq_total{job="obscura-pods",obscura_system="edge",envoy_http_conn_manager_prefix="edge"} > 0`)
		if err == nil && n == 0 {
			err = errors.New("no edge request counter yet")
		}
		return err
	})
	testenv.Eventually(e.t, 3*time.Minute, "every Mohito panel returns data", func() error {
		empty, err := prom.Empty(want)
		if err == nil && len(empty) > 0 {
			err = errors.New("no data: " + strings.Join(empty, "; "))
		}
		return err
	})
	n, _ := prom.Query(`up{job="obscura-pods"} == 1`)
	got, _ := snapshot()
	e.report.Notes = append(e.report.Notes, fmt.Sprintf("prometheus on the node: %d targets up (file SD of %d pods); %d Mohito panels returned data, %d allow-listed",
		n, len(got), len(want), len(panels)-len(want)))
}
