package roles

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestIngressRejectionsCountedByReason (issue 15 item 9): every way the proxy ingress refuses a
// participant's request is answered with its status and counted once under its reason in
// pda_proxy_rejected_total — and under no other reason. Before, only items refused inside an
// accepted request were counted (pda_proxy_items_total); a 400 or 403 left no trace.
func TestIngressRejectionsCountedByReason(t *testing.T) {
	e := newProxyBenchEnv(t)
	e.ingressCfg.Participants["participant-1"] = true
	m := NewMetrics(nil)
	g, err := NewIngress(e.ctx, e.ingressCfg, e.job, e.sec, e.js, NewRedisProxyStore(e.proxyRedis.Client()), slog.New(slog.DiscardHandler), m)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	call := func(h http.Handler, cn, target string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		if cn != "" {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: cn}}}}
		} else {
			r.TLS = nil
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	// expect runs one refused request and checks its status and that exactly reason rose by one.
	expect := func(what, reason string, code int, do func() *httptest.ResponseRecorder) {
		t.Helper()
		before := map[string]float64{}
		for _, r := range ProxyReasons {
			before[r] = testutil.ToFloat64(m.Rejected.WithLabelValues(r))
		}
		rec := do()
		if rec.Code != code {
			t.Errorf("%s: status %d (%s), want %d", what, rec.Code, rec.Body, code)
		}
		for _, r := range ProxyReasons {
			want := before[r]
			if r == reason {
				want++
			}
			if got := testutil.ToFloat64(m.Rejected.WithLabelValues(r)); got != want {
				t.Errorf("%s: pda_proxy_rejected_total{reason=%q} = %v, want %v", what, r, got, want)
			}
		}
	}

	sessionPath := contract.PathSession
	expect("no client certificate", RejectUnknownParticipant, http.StatusForbidden, func() *httptest.ResponseRecorder {
		return call(h, "", sessionPath, nil)
	})
	expect("certificate of no participant", RejectUnknownParticipant, http.StatusForbidden, func() *httptest.ResponseRecorder {
		return call(h, "mallory", sessionPath, nil)
	})
	expect("non-numeric window", RejectBadWindow, http.StatusBadRequest, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", sessionPath+"?window=next", nil)
	})
	expect("a window not open yet", RejectWindowClosed, http.StatusConflict, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", sessionPath+"?window="+strconv.FormatUint(e.window()+3, 10), nil)
	})

	rec := call(h, "participant-0", sessionPath, nil)
	var sess contract.SessionResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &sess) != nil {
		t.Fatalf("open a session: %d %s", rec.Code, rec.Body)
	}
	submit := contract.PathSubmit + "?session="
	expect("session id not hex", RejectBadSession, http.StatusBadRequest, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", submit+"zz", nil)
	})
	expect("session id of the wrong size", RejectBadSession, http.StatusBadRequest, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", submit+"00", nil)
	})
	var unknown pda.SessionID
	_, _ = rand.Read(unknown[:])
	expect("a session never opened", RejectUnknownSession, http.StatusForbidden, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", submit+hex.EncodeToString(unknown[:]), []byte("x"))
	})
	expect("another participant's session", RejectUnknownSession, http.StatusForbidden, func() *httptest.ResponseRecorder {
		return call(h, "participant-1", submit+sess.Session, []byte("x"))
	})
	expect("a body that is no submission", RejectBadBody, http.StatusBadRequest, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", submit+sess.Session, []byte("not a submission"))
	})
	expect("an empty body", RejectBadBody, http.StatusBadRequest, func() *httptest.ResponseRecorder {
		return call(h, "participant-0", submit+sess.Session, nil)
	})

	// The proxy's Redis unreachable (nothing listens on the address): 503, counted.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	down, err := NewIngress(e.ctx, e.ingressCfg, e.job, e.sec, e.js, NewRedisProxyStore(rdb), slog.New(slog.DiscardHandler), m)
	if err != nil {
		t.Fatal(err)
	}
	expect("Redis unreachable", RejectUnavailable, http.StatusServiceUnavailable, func() *httptest.ResponseRecorder {
		return call(down.Handler(), "participant-0", sessionPath, nil)
	})

	// Failed TLS handshakes, through the real HTTPS server: no client certificate, and one
	// from another CA.
	pki, err := NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(e.ctx, ln, srvTLS) }() // until e.ctx ends at cleanup
	other, err := NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.ClientTLS("participant-0")
	if err != nil {
		t.Fatal(err)
	}
	for i, certs := range [][]tls.Certificate{nil, foreign.Certificates} {
		before := testutil.ToFloat64(m.Rejected.WithLabelValues(RejectTLSHandshake))
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates: certs, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}} // the client tests the server's check, not the server's name
		if resp, err := c.Post("https://"+ln.Addr().String()+sessionPath, "application/octet-stream", nil); err == nil {
			resp.Body.Close()
			t.Fatalf("handshake %d: the ingress answered %s without a valid client certificate", i, resp.Status)
		}
		c.CloseIdleConnections()
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("handshake %d counted", i), func() error {
			if got := testutil.ToFloat64(m.Rejected.WithLabelValues(RejectTLSHandshake)); got != before+1 {
				return fmt.Errorf("tls_handshake = %v, want %v", got, before+1)
			}
			return nil
		})
	}
}
