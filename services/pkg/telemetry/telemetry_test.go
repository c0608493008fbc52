package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestDependencyUpFollowsRedis: a readiness check wrapped by Health.Dependency sets
// obscura_dependency_up{dependency="redis"} to 1 while a real redis-server answers PING and to 0
// once it is stopped; obscura_ready follows SetReady; both are served on /metrics.
func TestDependencyUpFollowsRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	reg := telemetry.NewRegistry()
	h := &telemetry.Health{}
	h.SetReady(false, "starting")
	if err := h.Register(reg); err != nil {
		t.Fatal(err)
	}
	check := h.Dependency("redis", func(ctx context.Context) error { return r.Client().Ping(ctx).Err() })
	run := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		return check(ctx)
	}
	srv := httptest.NewServer(telemetry.Handler(reg, h))
	defer srv.Close()
	scrape := func() string {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	expect := func(what string, lines ...string) {
		t.Helper()
		out := scrape()
		for _, l := range lines {
			if !strings.Contains(out, "\n"+l+"\n") {
				t.Errorf("%s: /metrics lacks %q", what, l)
			}
		}
	}

	expect("registered while starting", "obscura_ready 0")
	if err := run(); err != nil {
		t.Fatalf("PING of a running redis-server: %v", err)
	}
	h.SetReady(true, "")
	expect("redis answering", `obscura_dependency_up{dependency="redis"} 1`, "obscura_ready 1")

	r.Stop(t)
	if err := run(); err == nil {
		t.Fatal("PING of a stopped redis-server succeeded")
	}
	h.SetReady(false, "redis down")
	expect("redis stopped", `obscura_dependency_up{dependency="redis"} 0`, "obscura_ready 0")

	// State recorded before Register is exported once registered.
	reg2 := telemetry.NewRegistry()
	h2 := &telemetry.Health{}
	h2.SetDependency("nats", true)
	if err := h2.Register(reg2); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg2, "obscura_dependency_up"); err != nil || n != 1 {
		t.Errorf("obscura_dependency_up series after Register: %d (%v), want 1", n, err)
	}
}
