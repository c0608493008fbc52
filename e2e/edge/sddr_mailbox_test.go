package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/e2e/internal/sddrrun"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
	"github.com/obscura-iot/obscura/services/pkg/sddr/roles"
	"github.com/obscura-iot/obscura/services/testenv"
)

// mailboxPort is set on the chart (edge.sddrMailbox.port) and replaced with the mailbox's.
const mailboxPort = 18090

// TestMailboxBehindTheEdge runs the chart's edge with edge.sddrMailbox enabled in front of a
// real encounter mailbox (sddr/roles on a real redis-server): two devices that met exchange
// sealed messages through the edge's TLS listener (h2, the chart's certificate), the
// mailbox's rejections reach the client with their reason, and the edge's per-client limit
// (the bearer token) applies to the mailbox API too. The Mohito gateway's route still works.
func TestMailboxBehindTheEdge(t *testing.T) {
	rd := testenv.StartRedis(t)
	reg := prometheus.NewRegistry()
	mb, err := roles.NewMailbox(roles.MailboxOptions{Redis: rd.Client(), Registerer: reg, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(testenv.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mb.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mailbox: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(l.Addr().String())

	gw := startGatewayStub(t)
	e, files, envoyYAML := startEdgeWith(t, gw.addr,
		[]string{"port_value: " + strconv.Itoa(mailboxPort), "port_value: " + port},
		"-f", "charts/obscura/values-local.yaml",
		"--set", "edge.sddrMailbox.enabled=true,edge.sddrMailbox.port="+strconv.Itoa(mailboxPort))
	if !strings.Contains(envoyYAML, `prefix: "/v1/mailboxes/"`) {
		t.Fatalf("rendered envoy.yaml has no mailbox route:\n%s", envoyYAML)
	}

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12},
		Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	h := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	base := "https://" + e.ListenerAddr(0)

	cctx, ccancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer ccancel()
	if _, err := sddrrun.Exchange(cctx, base, h); err != nil {
		t.Fatalf("exchange through the edge: %v", err)
	}
	if v := testutil.ToFloat64(mb.Metrics().Requests.WithLabelValues("put", "ok")); v != 2 {
		t.Errorf("the mailbox stored %v messages; want 2", v)
	}

	// A rejection crosses the edge with its reason; then the edge's per-client bucket (burst 3
	// in render) limits a token before the mailbox's does.
	p, err := sddrrun.Meet(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: base, Token: sddrrun.Token(), HTTP: h}
	var se *client.StatusError
	if err := c.Put(cctx, p.BoxA.Address, []byte("not sealed")); !errors.As(err, &se) || se.Reason != roles.ReasonMalformed {
		t.Fatalf("malformed put through the edge: %v; want %s", err, roles.ReasonMalformed)
	}
	limited := false
	for range burst + 1 {
		if _, err := c.Fetch(cctx, p.BoxB.Address); errors.As(err, &se) && se.Code == http.StatusTooManyRequests {
			limited = true
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !limited {
		t.Errorf("a token past the edge's burst of %d was not limited", burst)
	}
	if v := testutil.ToFloat64(mb.Metrics().Rejections.WithLabelValues(roles.ReasonRateLimited)); v != 0 {
		t.Errorf("the mailbox limited %v requests: the edge's limit should have come first", v)
	}
	if code, st, err := call(cctx, h, e.ListenerAddr(0), "token-gw"); err != nil || code != http.StatusOK || st != "0" {
		t.Errorf("the gateway route beside the mailbox: HTTP %d grpc-status %q, %v", code, st, err)
	}
}
