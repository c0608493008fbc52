package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// Ports of the PDA passthrough set on the chart and replaced in the rendered envoy.yaml.
const (
	pdaEdgePort  = 18445
	pdaProxyPort = 18453
)

// TestPDAParticipantsPassThroughTheEdge runs the chart's edge with edge.pdaProxy enabled in
// front of a TLS server with the PDA ingress's TLS policy (pda/roles PKI: client certificates
// required and verified against the participants' CA). Through the edge's PDA listener a
// participant's TLS session ends at the upstream, not at Envoy: the client verifies the
// upstream's certificate (not the edge's), the upstream sees the participant's certificate
// and CN; a client without a certificate or with one of another CA is refused by the
// upstream's handshake; a cleartext connection matches no filter chain and is closed. The
// gateway's listener beside it is unchanged.
func TestPDAParticipantsPassThroughTheEdge(t *testing.T) {
	pki, err := pdaroles.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(testenv.Host, "0"), srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, pdaUpstream, _ := net.SplitHostPort(l.Addr().String())

	gw := startGatewayStub(t)
	envoyYAML, files := render(t, "-f", "charts/obscura/values-local.yaml",
		"--set", "edge.pdaProxy.enabled=true,edge.pdaProxy.job=attackers,edge.pdaProxy.port="+strconv.Itoa(pdaEdgePort),
		"--set", "operator.pdaProxyPort="+strconv.Itoa(pdaProxyPort))
	for _, want := range []string{"envoy.filters.network.tcp_proxy", "transport_protocol: tls", "port_value: " + strconv.Itoa(pdaEdgePort), "port_value: " + strconv.Itoa(pdaProxyPort)} {
		if !strings.Contains(envoyYAML, want) {
			t.Fatalf("rendered envoy.yaml lacks %q:\n%s", want, envoyYAML)
		}
	}
	certDir := t.TempDir()
	writeFiles(t, certDir, files)
	_, gwPort, _ := net.SplitHostPort(gw.addr)
	conf := strings.NewReplacer(
		"port_value: "+strconv.Itoa(edgePort), "port_value: {{index .ListenerPorts 0}}",
		"port_value: "+strconv.Itoa(healthPort), "port_value: {{index .ListenerPorts 1}}",
		"port_value: "+strconv.Itoa(pdaEdgePort), "port_value: {{index .ListenerPorts 2}}",
		"port_value: "+strconv.Itoa(adminPort), "port_value: {{.AdminPort}}",
		"port_value: "+strconv.Itoa(upstreamPort), "port_value: "+gwPort,
		"port_value: "+strconv.Itoa(pdaProxyPort), "port_value: "+pdaUpstream,
		"/etc/envoy/tls", certDir,
	).Replace(envoyYAML)
	e := testenv.StartEnvoy(t, conf, 3)
	addr := e.ListenerAddr(2)

	get := func(cfg *tls.Config) (string, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + addr + "/v1/whoami")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	// A participant: the upstream's certificate (verified against the participants' CA under
	// localhost), the participant's CN at the upstream.
	cfg, err := pki.ClientTLS("acme.vendors.obscura.dev")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "localhost"
	if cn, err := get(cfg); err != nil || cn != "acme.vendors.obscura.dev" {
		t.Fatalf("a participant through the edge: %q, %v; want its CN at the upstream", cn, err)
	}
	// Envoy did not terminate: the edge's own certificate is not what the client sees.
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "pda-proxy" {
		t.Errorf("the PDA listener presented %q; want the upstream's certificate (pda-proxy)", cn)
	}
	_ = conn.Close()

	// No client certificate, or one of another CA: refused by the upstream's handshake.
	noCert := &tls.Config{RootCAs: pki.Pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if cn, err := get(noCert); err == nil {
		t.Errorf("a client without a certificate got through the edge: %q", cn)
	}
	other, err := pdaroles.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.ClientTLS("acme.vendors.obscura.dev")
	if err != nil {
		t.Fatal(err)
	}
	foreign.RootCAs, foreign.ServerName = pki.Pool, "localhost"
	if cn, err := get(foreign); err == nil {
		t.Errorf("a certificate of another CA got through the edge: %q", cn)
	}

	// Cleartext matches no filter chain: the connection closes without an answer.
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(raw, "GET /v1/whoami HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if line, err := bufio.NewReader(raw).ReadString('\n'); err == nil {
		t.Errorf("a cleartext request through the PDA listener was answered: %q", line)
	}
	_ = raw.Close()

	// The gateway's listener beside it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	roots := pki.Pool.Clone()
	if !roots.AppendCertsFromPEM(files["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12},
		Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	if code, st, err := call(ctx, &http.Client{Transport: tr, Timeout: 10 * time.Second}, e.ListenerAddr(0), "token-pda"); err != nil || code != http.StatusOK || st != "0" {
		t.Errorf("the gateway route beside the PDA listener: HTTP %d grpc-status %q, %v", code, st, err)
	}
}

// writeFiles writes the edge's certificate files into dir.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
