// Package promrun runs a real Prometheus server (bin/prometheus, hack/tools.sh prometheus) for a
// test and reads the chart's Grafana dashboards (charts/obscura/dashboards), so e2e/dashboards
// and the cluster e2e check the same panels the same way (docs/metrics.md "Dashboards").
package promrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// Panel is one dashboard panel: its file, title and PromQL queries ($__rate_interval read as
// RateInterval).
type Panel struct {
	File, Title string
	Exprs       []string
}

// Panels reads every panel of charts/obscura/dashboards/<file> for each file (every dashboard
// when none is given), with Grafana's $__rate_interval replaced by rateInterval.
func Panels(t testing.TB, rateInterval string, files ...string) []Panel {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	if len(files) == 0 {
		paths, err = filepath.Glob(filepath.Join(root, "charts/obscura/dashboards/*.json"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no dashboards in charts/obscura/dashboards (%v)", err)
		}
	}
	for _, f := range files {
		paths = append(paths, filepath.Join(root, "charts/obscura/dashboards", f))
	}
	var out []Panel
	for _, f := range paths {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			pp := Panel{File: filepath.Base(f), Title: p.Title}
			for _, tg := range p.Targets {
				pp.Exprs = append(pp.Exprs, strings.ReplaceAll(tg.Expr, "$__rate_interval", rateInterval))
			}
			if len(pp.Exprs) == 0 {
				t.Errorf("%s: panel %q has no query", pp.File, p.Title)
			}
			out = append(out, pp)
		}
	}
	return out
}

// Server is a running Prometheus server.
type Server struct {
	Addr string
	Dir  string
	stop func()
}

// Stop stops the server (SIGTERM, by pid) before the test ends; the test's cleanup does
// nothing more then.
func (s *Server) Stop() { s.stop() }

// Start runs bin/prometheus with config (a prometheus.yml; the file is written to the server's
// directory, whose path replaces "$DIR" in it) on a free 127.0.0.1 port, and stops it (SIGTERM,
// by pid) when the test ends; on failure its log is logged. It returns once the server answers.
func Start(t testing.TB, config string) *Server {
	t.Helper()
	bin, err := testenv.Bin("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(config, "$DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir}
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+s.Addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			if err := testenv.Terminate(cmd.Process, exited, 30*time.Second); err != nil {
				t.Logf("prometheus: %v", err)
			}
			logf.Close()
			if t.Failed() {
				if b, err := os.ReadFile(logPath); err == nil {
					t.Logf("prometheus log:\n%s", b)
				}
			}
		})
	}
	t.Cleanup(s.stop)
	testenv.Eventually(t, 60*time.Second, "prometheus answers queries", func() error {
		_, err := s.Query("up")
		return err
	})
	return s
}

// Query evaluates expr through /api/v1/query and returns how many series it returned (1 for a
// scalar); an error when it does not parse or evaluate.
func (s *Server) Query(expr string) (int, error) {
	resp, err := http.PostForm("http://"+s.Addr+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var r struct {
		Status, Error string
		Data          struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	if r.Status != "success" {
		return 0, errors.New(r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return 1, nil
	}
	var res []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &res); err != nil {
		return 0, err
	}
	return len(res), nil
}

// Empty returns the panels none of whose queries returns a series (an error when a query fails).
func (s *Server) Empty(panels []Panel) ([]string, error) {
	var empty []string
	for _, p := range panels {
		got := false
		for _, e := range p.Exprs {
			n, err := s.Query(e)
			if err != nil {
				return nil, fmt.Errorf("%s / %q: query %q: %w", p.File, p.Title, e, err)
			}
			got = got || n > 0
		}
		if !got {
			empty = append(empty, p.File+"/"+p.Title)
		}
	}
	return empty, nil
}
