// Package edge runs the chart's Envoy edge for real: it renders charts/obscura with helm
// template, takes the envoy.yaml and the self-signed certificate the chart generates, rewrites
// nothing but ports and certificate paths, and starts bin/envoy in front of a small gRPC
// server (cleartext HTTP/2, like the Mohito gateway) on 127.0.0.1.
package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/obscura-iot/obscura/services/testenv"
)

// Ports set on the chart so the test can find them in the rendered envoy.yaml; each is then
// replaced with a free one.
const (
	edgePort     = 18443
	healthPort   = 18444
	adminPort    = 19901
	upstreamPort = 17443
	// The per-client bucket: burst 3, no refill during the test.
	burst = 3
)

// render returns the chart's envoy.yaml and its edge TLS Secret's files.
func render(t *testing.T, values ...string) (string, map[string][]byte) {
	t.Helper()
	args := append([]string{"template", "obscura", "charts/obscura", "--namespace", "obscura-system"}, values...)
	args = append(args, "--set", fmt.Sprintf("edge.port=%d,edge.healthPort=%d,edge.adminPort=%d,edge.upstream.port=%d", edgePort, healthPort, adminPort, upstreamPort),
		"--set", fmt.Sprintf("edge.rateLimit.maxTokens=%d,edge.rateLimit.tokensPerFill=1,edge.rateLimit.fillInterval=3600s", burst),
		"--show-only", "templates/edge-config.yaml", "--show-only", "templates/edge-tls.yaml")
	rendered, err := testenv.Helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, rendered)
	}
	out := []byte(rendered)
	var envoy string
	files := map[string][]byte{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode rendered chart: %v", err)
		}
		switch u.GetKind() {
		case "ConfigMap":
			envoy, _, _ = unstructured.NestedString(u.Object, "data", "envoy.yaml")
		case "Secret":
			data, _, _ := unstructured.NestedStringMap(u.Object, "data")
			for k, v := range data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("Secret %s key %s: %v", u.GetName(), k, err)
				}
				files[k] = b
			}
		}
	}
	if envoy == "" || len(files["tls.crt"]) == 0 || len(files["ca.crt"]) == 0 {
		t.Fatalf("chart rendered no envoy.yaml or edge certificate:\n%s", out)
	}
	return envoy, files
}

// gatewayStub answers every gRPC call with an empty message and status OK, over h2c.
type gatewayStub struct {
	calls atomic.Int64
	addr  string
}

func startGatewayStub(t *testing.T) *gatewayStub {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(testenv.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatewayStub{addr: l.Addr().String()}
	srv := &http.Server{
		Protocols:         new(http.Protocols),
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				http.Error(w, "gRPC over HTTP/2 only", http.StatusBadRequest)
				return
			}
			g.calls.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			_, _ = w.Write([]byte{0, 0, 0, 0, 0}) // one uncompressed, empty message
			w.Header().Set("Grpc-Status", "0")
		}),
	}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return g
}

// call makes one unary gRPC call through the edge as the client holding token and returns the
// HTTP status and the gRPC status ("" when there is none).
func call(ctx context.Context, c *http.Client, addr, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+"/obscura.mohito.v1.Gateway/RoundInfo",
		bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	if resp.ProtoMajor != 2 {
		return 0, "", fmt.Errorf("edge answered over %s; want HTTP/2", resp.Proto)
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status") // a trailers-only (local) reply
	}
	return resp.StatusCode, st, nil
}

// startEdge renders the chart's edge with values, points its upstream at upstream (host:port
// on loopback) and starts Envoy; it returns Envoy, the chart's certificate files and the
// rendered envoy.yaml.
func startEdge(t *testing.T, upstream string, values ...string) (*testenv.Envoy, map[string][]byte, string) {
	t.Helper()
	return startEdgeWith(t, upstream, nil, values...)
}

// startEdgeWith is startEdge with more rewrites of the rendered envoy.yaml (old, new pairs:
// another upstream's port).
func startEdgeWith(t *testing.T, upstream string, rewrites []string, values ...string) (*testenv.Envoy, map[string][]byte, string) {
	t.Helper()
	envoyYAML, files := render(t, values...)
	certDir := t.TempDir()
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(certDir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, gwPort, _ := net.SplitHostPort(upstream)

	// Rewrite ports and certificate paths only; keep Go's template delimiters out of the rest.
	for _, p := range []int{edgePort, healthPort, adminPort, upstreamPort} {
		if !strings.Contains(envoyYAML, "port_value: "+strconv.Itoa(p)) {
			t.Fatalf("rendered envoy.yaml has no port %d:\n%s", p, envoyYAML)
		}
	}
	if strings.Contains(envoyYAML, "{{") {
		t.Fatal("rendered envoy.yaml contains {{, which StartEnvoy's template would interpret")
	}
	conf := strings.NewReplacer(append([]string{
		"port_value: " + strconv.Itoa(edgePort), "port_value: {{index .ListenerPorts 0}}",
		"port_value: " + strconv.Itoa(healthPort), "port_value: {{index .ListenerPorts 1}}",
		"port_value: " + strconv.Itoa(adminPort), "port_value: {{.AdminPort}}",
		"port_value: " + strconv.Itoa(upstreamPort), "port_value: " + gwPort,
		"/etc/envoy/tls", certDir,
	}, rewrites...)...).Replace(envoyYAML)
	return testenv.StartEnvoy(t, conf, 2), files, envoyYAML
}

func TestEdgeTLSAndPerClientRateLimit(t *testing.T) {
	gw := startGatewayStub(t)
	e, files, _ := startEdge(t, gw.addr, "-f", "charts/obscura/values-local.yaml")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// The health listener answers /ready for the probes.
	resp, err := http.Get("http://" + e.ListenerAddr(1) + "/ready")
	if err != nil {
		t.Fatalf("GET /ready on the health listener: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ready on the health listener: %d; want 200", resp.StatusCode)
	}

	// TLS with the chart's certificate: verified against its ca.crt under the server name the
	// chart tells clients (localhost in hostNetwork mode); h2 only.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12},
		Protocols:       new(http.Protocols),
		Proxy:           nil,
	}
	tr.Protocols.SetHTTP2(true)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)

	conn, err := tls.Dial("tcp", e.ListenerAddr(0), &tls.Config{RootCAs: roots, ServerName: "obscura-edge.obscura-system.svc", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS to the edge as obscura-edge.obscura-system.svc: %v", err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q; want h2", p)
	}
	conn.Close()
	if _, err := tls.Dial("tcp", e.ListenerAddr(0), &tls.Config{ServerName: "localhost"}); err == nil {
		t.Error("TLS without the chart's CA succeeded; want an unknown-authority error")
	}

	// Client A spends its burst, then is limited; client B is not affected.
	for i := range burst {
		code, st, err := call(ctx, client, e.ListenerAddr(0), "token-a")
		if err != nil || code != http.StatusOK || st != "0" {
			t.Fatalf("client A call %d: HTTP %d grpc-status %q, %v; want 200 / 0", i+1, code, st, err)
		}
	}
	code, st, err := call(ctx, client, e.ListenerAddr(0), "token-a")
	if err != nil {
		t.Fatal(err)
	}
	if st != "8" && code != http.StatusTooManyRequests {
		t.Fatalf("client A over its limit: HTTP %d grpc-status %q; want RESOURCE_EXHAUSTED (8) or 429", code, st)
	}
	t.Logf("client A over its limit: HTTP %d grpc-status %s", code, st)
	for i := range burst {
		code, st, err := call(ctx, client, e.ListenerAddr(0), "token-b")
		if err != nil || code != http.StatusOK || st != "0" {
			t.Fatalf("client B call %d after A was limited: HTTP %d grpc-status %q, %v; want 200 / 0", i+1, code, st, err)
		}
	}
	if n := gw.calls.Load(); n != 2*burst {
		t.Errorf("the gateway saw %d calls; want %d (the limited one must not reach it)", n, 2*burst)
	}
}

// TestEdgeConfigOnPodNetworkValidates checks the default (pod network) rendering, whose
// upstream is the gateway Service's DNS name, with envoy --mode validate.
func TestEdgeConfigOnPodNetworkValidates(t *testing.T) {
	for _, c := range []struct {
		name         string
		values, want []string
	}{
		{"defaults", nil, []string{"type: STRICT_DNS", "address: round-gateway.obscura-system.svc.cluster.local", "address: 0.0.0.0"}},
		{"sddr mailbox", []string{"--set", "edge.sddrMailbox.enabled=true"},
			[]string{`prefix: "/v1/mailboxes/"`, "address: mailbox-sddr-mailbox.obscura-system.svc.cluster.local, port_value: 8090"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			envoyYAML, files := render(t, c.values...)
			for _, want := range c.want {
				if !strings.Contains(envoyYAML, want) {
					t.Errorf("rendered envoy.yaml lacks %q", want)
				}
			}
			dir := t.TempDir()
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, "envoy.yaml")
			if err := os.WriteFile(path, []byte(strings.ReplaceAll(envoyYAML, "/etc/envoy/tls", dir)), 0o600); err != nil {
				t.Fatal(err)
			}
			bin, err := testenv.Bin("envoy")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "--mode", "validate", "--config-path", path, "--disable-hot-restart", "--log-level", "warning").CombinedOutput()
			if err != nil {
				t.Fatalf("envoy --mode validate: %v\n%s", err, out)
			}
		})
	}
}
