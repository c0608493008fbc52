// Package telemetry gives every Obscura service the same observability and
// lifecycle: a JSON slog logger, a Prometheus registry, an HTTP server with
// /metrics, /healthz and /readyz, and a runner that shuts everything down
// gracefully on SIGINT/SIGTERM. Loggers never receive keys, plaintexts or
// identifiers a spec hides from the logging party; callers log counts.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger returns a JSON logger for role at level ("debug", "info", "warn", "error").
func NewLogger(w io.Writer, role, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})).With("role", role)
}

// Discard is a logger that drops everything (tests, the demo's quiet mode).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// NewRegistry returns a registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Health tracks liveness and readiness checks. Once registered ([Health.Register]) it exports
// obscura_ready (1 while /readyz answers 200) and obscura_dependency_up{dependency} (1 while
// the dependency's last readiness check passed: nats, redis, vault), so an unavailable NATS or
// Redis can be alerted per role. The zero value is ready to use.
type Health struct {
	ready atomic.Bool
	mu    sync.Mutex
	why   string
	deps  map[string]bool
	// set by Register
	readyGauge prometheus.Gauge
	depGauge   *prometheus.GaugeVec
}

// Register exports the readiness gauges on reg (the state recorded so far included).
func (h *Health) Register(reg prometheus.Registerer) error {
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "obscura_ready", Help: "1 while the process is ready (/readyz answers 200)."})
	deps := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "obscura_dependency_up", Help: "1 while the dependency (nats, redis, vault) passed its last readiness check."}, []string{"dependency"})
	if err := reg.Register(ready); err != nil {
		return err
	}
	if err := reg.Register(deps); err != nil {
		reg.Unregister(ready)
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readyGauge, h.depGauge = ready, deps
	ready.Set(b2f(h.ready.Load()))
	for d, up := range h.deps {
		deps.WithLabelValues(d).Set(b2f(up))
	}
	return nil
}

// SetReady marks the process ready (or not, with a reason).
func (h *Health) SetReady(ok bool, why string) {
	h.mu.Lock()
	h.ready.Store(ok)
	h.why = why
	if h.readyGauge != nil {
		h.readyGauge.Set(b2f(ok))
	}
	h.mu.Unlock()
}

// SetDependency records whether dependency (nats, redis, vault) answered its last check.
func (h *Health) SetDependency(dependency string, up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.deps == nil {
		h.deps = map[string]bool{}
	}
	h.deps[dependency] = up
	if h.depGauge != nil {
		h.depGauge.WithLabelValues(dependency).Set(b2f(up))
	}
}

// Dependency wraps check, a readiness check of dependency (a Redis PING, a Vault status call),
// so that every run of it sets obscura_dependency_up{dependency}.
func (h *Health) Dependency(dependency string, check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		err := check(ctx)
		h.SetDependency(dependency, err == nil)
		return err
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ready reports readiness.
func (h *Health) Ready() bool { return h.ready.Load() }

// Handler serves /metrics, /healthz and /readyz.
func Handler(reg *prometheus.Registry, h *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if h.Ready() {
			io.WriteString(w, "ready\n")
			return
		}
		h.mu.Lock()
		why := h.why
		h.mu.Unlock()
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
	})
	return mux
}

// ServeOption runs once the observability server has bound its address
// (for instance [Publish]); an error stops the server.
type ServeOption func(bound net.Addr) error

// Serve runs the observability server on addr ("" disables it) until ctx
// ends. addr may have port 0 (hostNetwork replicas); [Publish] tells where
// it landed.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, h *Health, log *slog.Logger, opts ...ServeOption) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	for _, o := range opts {
		if err := o(l.Addr()); err != nil {
			l.Close()
			return err
		}
	}
	srv := &http.Server{Handler: Handler(reg, h), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("observability server listening", "addr", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// SignalContext returns a context cancelled on SIGINT or SIGTERM.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// Group runs functions until the first fails or ctx ends, then cancels the
// rest and waits for them: the graceful-shutdown runner.
type Group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// NewGroup returns a group bound to ctx.
func NewGroup(ctx context.Context) (*Group, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{ctx: ctx, cancel: cancel}, ctx
}

// Go starts f.
func (g *Group) Go(name string, f func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(g.ctx); err != nil && g.ctx.Err() == nil {
			g.once.Do(func() { g.err = fmt.Errorf("%s: %w", name, err) })
			g.cancel(err)
		}
	}()
}

// Wait waits for every function and returns the first error.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}

// Stop cancels the group.
func (g *Group) Stop() { g.cancel(nil) }
