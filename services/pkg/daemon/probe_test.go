package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestProbe: probe reads the address file a role writes for its port-0
// observability server: success on 200, an error (exit 1) otherwise, a
// usage error (exit 2) without a path.
func TestProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "obscura-health-addr")
	t.Setenv("OBSCURA_ADDR_FILE", path)
	af, err := telemetry.NewAddrFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := &telemetry.Health{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- telemetry.Serve(ctx, "127.0.0.1:0", telemetry.NewRegistry(), h, telemetry.Discard(),
			telemetry.Publish(af, telemetry.AddrHealth, telemetry.AddrMetrics))
	}()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 5*time.Second, "probe /healthz succeeds", func() error { return RunProbe([]string{"/healthz"}) })
	if err := RunProbe([]string{"/readyz"}); err == nil || !strings.Contains(err.Error(), "503") || errors.Is(err, ErrConfig) {
		t.Errorf("probe /readyz of an unready role: %v", err)
	}
	h.SetReady(true, "")
	if err := RunProbe([]string{"--timeout", "1s", "/readyz"}); err != nil {
		t.Errorf("probe /readyz of a ready role: %v", err)
	}
	if err := RunProbe(nil); !errors.Is(err, ErrConfig) {
		t.Errorf("probe without a path: %v", err)
	}
	t.Setenv("OBSCURA_ADDR_FILE", filepath.Join(t.TempDir(), "missing"))
	if err := RunProbe([]string{"/healthz"}); err == nil || errors.Is(err, ErrConfig) {
		t.Errorf("probe without an address file: %v", err)
	}
}
