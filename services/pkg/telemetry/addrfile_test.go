package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/testenv"
)

// serve runs the observability server on 127.0.0.1:0, publishing into af,
// and returns the health address once the file names it.
func serve(t *testing.T, af *AddrFile, path string, h *Health) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, "127.0.0.1:0", NewRegistry(), h, Discard(), Publish(af, AddrHealth, AddrMetrics))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var addr string
	testenv.Eventually(t, 5*time.Second, "the address file names the health server", func() (err error) {
		addr, err = ReadAddr(path, AddrHealth)
		return err
	})
	return addr
}

func TestAddrFileAndProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "obscura-health-addr")
	if err := os.WriteFile(path, []byte("health=127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	af, err := NewAddrFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAddr(path, AddrHealth); !errors.Is(err, ErrNoAddr) {
		t.Fatalf("stale address file not removed: %v", err)
	}
	h := &Health{}
	h.SetReady(false, "NATS not connected")
	addr := serve(t, af, path, h)
	if err := af.Record("127.0.0.1:50051", AddrGRPC); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	want := fmt.Sprintf("grpc=127.0.0.1:50051\nhealth=%s\nmetrics=%s\n", addr, addr)
	if string(b) != want {
		t.Fatalf("address file:\n%s\nwant:\n%s", b, want)
	}
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("published the unbound address %s", addr)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}

	ctx := context.Background()
	cases := []struct {
		path  string
		ready bool
		want  string // "" = success
	}{
		{"/healthz", false, ""},
		{"/readyz", false, "503 not ready: NATS not connected"},
		{"/readyz", true, ""},
		{"/nope", true, "404"},
	}
	for _, c := range cases {
		h.SetReady(c.ready, "NATS not connected")
		err := Probe(ctx, addr, c.path)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("probe %s (ready %v): %v", c.path, c.ready, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("probe %s (ready %v): %v, want %q", c.path, c.ready, err, c.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("probe reason is not one line: %q", err)
		}
	}
	if err := Probe(ctx, "127.0.0.1:1", "/healthz"); err == nil {
		t.Error("probe of a closed port succeeded")
	}
	if _, err := ProbeAddr(filepath.Join(t.TempDir(), "missing"), ":8081"); !errors.Is(err, ErrNoAddr) {
		t.Errorf("missing address file: %v", err)
	}
	if a, err := ProbeAddr("", ":8081"); err != nil || a != ":8081" {
		t.Errorf("fallback: %q %v", a, err)
	}
	if _, err := ProbeAddr("", "127.0.0.1:0"); err == nil {
		t.Error("probing port 0 without an address file was accepted")
	}
}

func TestNilAddrFile(t *testing.T) {
	af, err := NewAddrFile("")
	if af != nil || err != nil {
		t.Fatalf("NewAddrFile(\"\") = %v, %v", af, err)
	}
	if err := af.Record("127.0.0.1:1", AddrHealth); err != nil {
		t.Fatal(err)
	}
}

// TestReusePort: two servers listen on one address with SO_REUSEPORT and
// both get connections; without it the second listen fails.
func TestReusePort(t *testing.T) {
	ctx := context.Background()
	l1, err := Listen(ctx, "127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	addr := l1.Addr().String()
	l2, err := Listen(ctx, addr, true)
	if err != nil {
		t.Fatalf("second listener with SO_REUSEPORT on %s: %v", addr, err)
	}
	if l3, err := Listen(ctx, addr, false); err == nil {
		l3.Close()
		t.Fatalf("a listener without SO_REUSEPORT shared %s", addr)
	}
	for i, l := range []net.Listener{l1, l2} {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, i) })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	seen := map[string]int{}
	for n := 0; n < 500 && len(seen) < 2; n++ {
		resp, err := cl.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen[string(b)]++
	}
	if len(seen) != 2 {
		t.Fatalf("connections reached only %v", seen)
	}
}
