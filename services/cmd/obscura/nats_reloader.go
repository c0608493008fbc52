package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// NATSReloaderConfig is the configuration of `mohito nats-reloader`, the nats-server sidecar
// that makes the server reload its configuration when a mounted file changes. The kubelet
// updates a Secret volume by swapping a symlink, so the reloader polls the content's hash
// rather than watching inotify events on a path that is replaced under it.
type NATSReloaderConfig struct {
	Watch    string
	PIDFile  string
	Interval time.Duration
	Addr     string
	LogLevel string
}

func parseNATSReloader(args []string) (*NATSReloaderConfig, error) {
	f := daemon.NewFlags("nats-reloader")
	var c NATSReloaderConfig
	f.String(&c.Watch, "watch", "", "configuration file to watch (the rendered accounts, accounts.conf)", "OBSCURA_NATS_RELOADER_WATCH")
	f.String(&c.PIDFile, "pid-file", "", "nats-server's pid file (nats-server --pid); the pid gets SIGHUP", "OBSCURA_NATS_RELOADER_PID_FILE")
	f.Duration(&c.Interval, "interval", 2*time.Second, "how often to hash the file", "OBSCURA_NATS_RELOADER_INTERVAL")
	f.String(&c.Addr, "metrics-addr", ":9090", "/metrics, /healthz and /readyz listen address (empty: off)")
	f.String(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	if err := daemon.ParseFlags(f, args); err != nil {
		return nil, err
	}
	var errs []error
	if c.Watch == "" {
		errs = append(errs, errors.New("--watch is required"))
	}
	if c.PIDFile == "" {
		errs = append(errs, errors.New("--pid-file is required"))
	}
	if c.Interval < 10*time.Millisecond || c.Interval > time.Hour {
		errs = append(errs, fmt.Errorf("--interval %s must be between 10ms and 1h", c.Interval))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q must be debug, info, warn or error", c.LogLevel))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errConfig, errors.Join(errs...))
	}
	return &c, nil
}

func runNATSReloader(args []string) error {
	c, err := parseNATSReloader(args)
	if err != nil {
		return err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	log := telemetry.NewLogger(os.Stderr, "nats-reloader", c.LogLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	health.SetReady(false, "configuration not read yet")
	if err := health.Register(reg); err != nil {
		return err
	}
	g, gctx := telemetry.NewGroup(ctx)
	g.Go("observability", func(ctx context.Context) error { return telemetry.Serve(ctx, c.Addr, reg, health, log) })
	g.Go("reloader", func(ctx context.Context) error { return newNATSReloader(c, log, reg, health).run(ctx) })
	<-gctx.Done()
	log.Info("shutting down")
	return g.Wait()
}

// natsReloader signals nats-server each time the watched file's content changes.
type natsReloader struct {
	cfg    *NATSReloaderConfig
	log    *slog.Logger
	health *telemetry.Health
	// applied is the hash the server was last signalled for ("" before the first signal);
	// appliedShape is the hash of its accounts without their user lines.
	applied, appliedShape string

	signals    *prometheus.CounterVec // by signal: hup (reload), term (restart)
	failures   prometheus.Counter
	lastSignal prometheus.Gauge
}

func newNATSReloader(c *NATSReloaderConfig, log *slog.Logger, reg prometheus.Registerer, h *telemetry.Health) *natsReloader {
	r := &natsReloader{cfg: c, log: log, health: h,
		signals:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "obscura_nats_reloader_signals_total", Help: "Signals sent to nats-server after a configuration change (hup: reload users; term: restart on new accounts, imports or exports)."}, []string{"signal"}),
		failures:   prometheus.NewCounter(prometheus.CounterOpts{Name: "obscura_nats_reloader_failures_total", Help: "Changes not signalled yet: file or pid unreadable, process gone (retried every interval)."}),
		lastSignal: prometheus.NewGauge(prometheus.GaugeOpts{Name: "obscura_nats_reloader_last_signal_timestamp_seconds", Help: "When nats-server was last signalled."}),
	}
	reg.MustRegister(r.signals, r.failures, r.lastSignal)
	return r
}

// run polls until ctx ends. The first hash it sees is signalled too: a change made between
// the server's start and the reloader's would otherwise never be loaded, and a reload of an
// unchanged configuration is a no-op for nats-server.
func (r *natsReloader) run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.check(); err != nil {
			r.failures.Inc()
			r.health.SetReady(false, err.Error())
			r.log.Warn("configuration not reloaded yet", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check hashes the file and signals the server when the hash differs from the one applied.
func (r *natsReloader) check() error {
	data, err := os.ReadFile(r.cfg.Watch)
	if err != nil {
		return fmt.Errorf("read watched file: %w", err)
	}
	hash := contentHash(data)
	if hash == r.applied {
		r.health.SetReady(true, "")
		return nil
	}
	pid, err := readPID(r.cfg.PIDFile)
	if err != nil {
		return err
	}
	// nats-server reloads users on SIGHUP, but a reload does not rewire the service imports
	// and exports of accounts that already exist (observed with 2.15.2: a vendor added later
	// timed out publishing into the integrator's imported inbox until the server restarted).
	// So a change of the accounts' shape — an account, an import or an export — restarts the
	// server (SIGTERM: it closes its clients, which reconnect; the container restarts with its
	// JetStream store intact); a change of users only is a reload.
	shape := contentHash(accountShape(data))
	sig, what, label := syscall.SIGHUP, "reload", "hup"
	if r.appliedShape != "" && shape != r.appliedShape {
		sig, what, label = syscall.SIGTERM, "restart", "term"
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal nats-server (pid %d): %w", pid, err)
	}
	r.log.Info("configuration changed: nats-server signalled to "+what, "hash", hash, "previous", r.applied, "pid", pid)
	r.applied, r.appliedShape = hash, shape
	r.signals.WithLabelValues(label).Inc()
	r.lastSignal.SetToCurrentTime()
	r.health.SetReady(true, "")
	return nil
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid < 1 {
		return 0, fmt.Errorf("pid file %s holds no process id", path)
	}
	return pid, nil
}

// accountShape is the configuration without its user lines (`{user: …}`, one per line as the
// operator renders them): what changes when accounts, imports or exports do.
func accountShape(data []byte) []byte {
	var out []byte
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "{user:") {
			out = append(out, l...)
		}
	}
	return out
}

// contentHash names a configuration in logs without revealing it.
func contentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
