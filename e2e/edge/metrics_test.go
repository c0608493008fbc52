package edge

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEdgeMetricsOnHealthListenerHoldNoToken (finding E-1, docs/metrics.md): the chart's health
// listener serves Envoy's Prometheus stats on GET /stats/prometheus, routed to the admin
// listener on 127.0.0.1, and nothing else of the admin API. The per-client rate limit's
// descriptor is the user's access token: after clients have been served and limited, no stat
// name or label carries a token (nor the form Envoy's stat-name sanitizing would give it), while
// the limiter's own counters are there.
func TestEdgeMetricsOnHealthListenerHoldNoToken(t *testing.T) {
	gw := startGatewayStub(t)
	e, files, _ := startEdge(t, gw.addr, "-f", "charts/obscura/values-local.yaml")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12},
		Protocols:       new(http.Protocols),
	}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// Two clients with token-like values (the characters of real tokens and a few Envoy would
	// rewrite in a stat name); the first goes over its limit.
	tokens := []string{"Bearer obscura.tok-" + randHex(t), "obscura:tok/" + randHex(t) + "=="}
	limited := false
	for i := 0; i <= burst; i++ {
		code, st, err := call(ctx, client, e.ListenerAddr(0), tokens[0])
		if err != nil {
			t.Fatal(err)
		}
		limited = limited || st == "8" || code == http.StatusTooManyRequests
	}
	if !limited {
		t.Fatalf("client 1 made %d calls against a burst of %d and was never limited", burst+1, burst)
	}
	if code, st, err := call(ctx, client, e.ListenerAddr(0), tokens[1]); err != nil || code != http.StatusOK || st != "0" {
		t.Fatalf("client 2: HTTP %d grpc-status %q, %v; want 200 / 0", code, st, err)
	}

	get := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+e.ListenerAddr(1)+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s on the health listener: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	code, stats := get(http.MethodGet, "/stats/prometheus")
	if code != http.StatusOK {
		t.Fatalf("GET /stats/prometheus on the health listener: %d; want 200\n%.500s", code, stats)
	}
	// The limiter's counters and the edge's request counters are there, in Prometheus format.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^envoy_http_local_rate_limit_rate_limited\{[^}]*edge_client_limit[^}]*\} [1-9]`),
		regexp.MustCompile(`(?m)^envoy_http_downstream_rq_total\{[^}]*envoy_http_conn_manager_prefix="edge"[^}]*\} [1-9]`),
		regexp.MustCompile(`(?m)^# TYPE envoy_cluster_upstream_rq_total counter$`),
	} {
		if !want.MatchString(stats) {
			t.Errorf("/stats/prometheus has no line matching %s", want)
		}
	}
	// No token, nor any part of it Envoy might keep after sanitizing a stat name.
	san := regexp.MustCompile(`[^A-Za-z0-9_]`)
	for _, tok := range tokens {
		for _, form := range []string{tok, san.ReplaceAllString(tok, "_"), strings.ToLower(san.ReplaceAllString(tok, "_"))} {
			for _, part := range strings.FieldsFunc(form, func(r rune) bool { return r == '_' || r == ' ' }) {
				if len(part) >= 8 && strings.Contains(stats, part) {
					t.Errorf("/stats/prometheus carries %q, part of a client's token %q", part, tok)
				}
			}
		}
	}
	t.Logf("/stats/prometheus: %d bytes, %d lines, no token", len(stats), strings.Count(stats, "\n"))

	// The rest of the admin API stays unreachable from the health listener.
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/stats"}, {http.MethodGet, "/config_dump"}, {http.MethodGet, "/clusters"},
		{http.MethodPost, "/quitquitquit"}, {http.MethodPost, "/healthcheck/fail"}, {http.MethodPost, "/stats/prometheus"},
		{http.MethodGet, "/stats/prometheus/../config_dump"},
	} {
		if code, body := get(c.method, c.path); code != http.StatusNotFound {
			t.Errorf("%s %s on the health listener: %d; want 404\n%.300s", c.method, c.path, code, body)
		}
	}
	if code, _ := get(http.MethodGet, "/ready"); code != http.StatusOK {
		t.Errorf("GET /ready after the admin checks: %d; want 200 (the edge was made to fail or quit)", code)
	}
}

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
