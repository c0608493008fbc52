package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// A Role is one long-running service of a system.
type Role interface {
	// Setup builds the role on the runtime: streams, buckets, keys, listeners. It is retried
	// (with backoff, readiness false) until it succeeds, because NATS, Redis or another
	// party may come up after this process. It returns what runs until shutdown and the
	// checks that keep /readyz true.
	Setup(ctx context.Context, rt *Runtime) (run func(ctx context.Context) error, checks []Check, err error)
}

// A Check is one readiness condition (a stream or consumer the role needs, a store it talks
// to); nil means ready.
type Check func(ctx context.Context) error

// StreamExists is ready when the stream exists.
func StreamExists(js jetstream.JetStream, name string) Check {
	return func(ctx context.Context) error {
		if _, err := js.Stream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		return nil
	}
}

// ConsumerExists is ready when the durable consumer exists on the stream.
func ConsumerExists(js jetstream.JetStream, stream, durable string) Check {
	return func(ctx context.Context) error {
		if _, err := js.Consumer(ctx, stream, durable); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
		}
		return nil
	}
}

// Runtime is what a role gets from the daemon: its logger, metrics registry, health state,
// NATS connection and the address file of its listeners.
type Runtime struct {
	Name     string
	Log      *slog.Logger
	Registry *prometheus.Registry
	Health   *telemetry.Health
	NC       *nats.Conn
	JS       jetstream.JetStream
	Addrs    *telemetry.AddrFile // records nothing without --addr-file

	common *Common
	checks []Check // always-on checks added before Run (e.g. a Redis ping)
}

// New prepares the runtime of role name (a logger and a registry the caller may register its
// metrics with) before Run connects anything.
// The registry exports obscura_ready and obscura_dependency_up (telemetry.Health).
func New(name string, c *Common) *Runtime {
	rt := &Runtime{Name: name, common: c, Log: telemetry.NewLogger(os.Stderr, name, c.LogLevel),
		Registry: telemetry.NewRegistry(), Health: &telemetry.Health{}}
	if err := rt.Health.Register(rt.Registry); err != nil {
		panic(err) // a fresh registry holds no other obscura_ready
	}
	return rt
}

// AddCheck adds a readiness condition that holds for the process's whole life (a store's
// ping), checked before the role's own.
func (rt *Runtime) AddCheck(c Check) { rt.checks = append(rt.checks, c) }

// AddDependency adds the readiness check of a dependency (a Redis PING): AddCheck, and every
// run of it sets obscura_dependency_up{dependency}. NATS is the runtime's own dependency
// ("nats", its connection state).
func (rt *Runtime) AddDependency(dependency string, c Check) {
	rt.AddCheck(Check(rt.Health.Dependency(dependency, c)))
}

// Run serves metrics and health, connects to NATS, sets the role up (retried until it
// succeeds), runs it until SIGTERM/SIGINT or its error, keeps /readyz in step, and on the way
// out drains the NATS connection so acks and publishes in flight are not lost.
func (rt *Runtime) Run(role Role) error {
	c := rt.common
	rt.Health.SetReady(false, "starting")
	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	g, gctx := telemetry.NewGroup(ctx)
	af, err := telemetry.NewAddrFile(c.AddrFile)
	if err != nil {
		return err
	}
	rt.Addrs = af
	metricsNames := []string{telemetry.AddrMetrics}
	if c.HealthAddr == c.MetricsAddr {
		metricsNames = append(metricsNames, telemetry.AddrHealth)
	}
	g.Go("metrics server", func(ctx context.Context) error {
		return telemetry.Serve(ctx, c.MetricsAddr, rt.Registry, rt.Health, rt.Log, telemetry.Publish(af, metricsNames...))
	})
	if c.HealthAddr != c.MetricsAddr {
		g.Go("health server", func(ctx context.Context) error {
			return telemetry.Serve(ctx, c.HealthAddr, rt.Registry, rt.Health, rt.Log, telemetry.Publish(af, telemetry.AddrHealth))
		})
	}
	// IgnoreAuthErrorAbort: nats.go closes a connection for good after the same authorization
	// error twice, but in a NATS cluster whose nodes restart in turns to load a new account
	// (docs/chart.md) a role reconnecting to a node not yet restarted is refused until its
	// turn; it must keep trying, not exit and crash-loop.
	opts := []nats.Option{nats.Name("obscura-" + rt.Name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(500 * time.Millisecond),
		nats.IgnoreAuthErrorAbort()}
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	} else if c.NATSUser != "" {
		opts = append(opts, nats.UserInfo(c.NATSUser, c.natsPassword))
	}
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		g.Stop()
		_ = g.Wait()
		return fmt.Errorf("connect to NATS %s: %w", c.NATSURL, err)
	}
	rt.NC = nc
	if rt.JS, err = jetstream.New(nc); err != nil {
		nc.Close()
		g.Stop()
		_ = g.Wait()
		return err
	}
	rt.JS = natsx.WithReplicas(rt.JS, c.NATSReplicas)
	run, checks, err := rt.setup(gctx, role)
	if err != nil {
		nc.Close()
		g.Stop()
		_ = g.Wait()
		return err
	}
	if gctx.Err() == nil {
		g.Go(rt.Name, run)
		g.Go("readiness", func(ctx context.Context) error { return rt.watchReadiness(ctx, checks) })
	}
	err = g.Wait()
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if derr := nc.Drain(); derr == nil {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
		}
	}
	nc.Close()
	if err != nil && ctx.Err() == nil {
		return err
	}
	rt.Log.Info("stopped")
	return nil
}

// setup runs role.Setup until it succeeds or the process is told to stop.
func (rt *Runtime) setup(ctx context.Context, role Role) (func(context.Context) error, []Check, error) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		if rt.NC.IsClosed() {
			// nats.go gives up after repeated authorization failures.
			return nil, nil, fmt.Errorf("NATS connection closed: %v", rt.NC.LastError())
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rt.Health.SetDependency("nats", rt.NC.IsConnected())
		err := firstError(sctx, rt.checks)
		var run func(context.Context) error
		var checks []Check
		if err == nil {
			run, checks, err = role.Setup(sctx, rt)
		}
		cancel()
		if err == nil {
			return run, checks, nil
		}
		if errors.Is(err, ErrConfig) {
			// A setup that finds the configuration wrong (against what NATS holds) will not
			// succeed by retrying: the process exits with status 2.
			return nil, nil, err
		}
		rt.Health.SetReady(false, err.Error())
		rt.Log.Warn("setup not complete, retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	return func(context.Context) error { return nil }, nil, nil
}

func firstError(ctx context.Context, checks []Check) error {
	for _, c := range checks {
		if err := c(ctx); err != nil {
			return err
		}
	}
	return nil
}

// watchReadiness keeps /readyz in step with the NATS connection, the always-on checks (every
// one runs each time, so each dependency's gauge stays current) and the role's checks.
func (rt *Runtime) watchReadiness(ctx context.Context, checks []Check) error {
	for {
		if rt.NC.IsClosed() {
			rt.Health.SetDependency("nats", false)
			return fmt.Errorf("NATS connection closed: %v", rt.NC.LastError())
		}
		why := ""
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		natsUp := rt.NC.IsConnected()
		rt.Health.SetDependency("nats", natsUp)
		var depErr error
		for _, c := range rt.checks {
			if err := c(cctx); err != nil && depErr == nil {
				depErr = err
			}
		}
		switch {
		case !natsUp:
			why = "NATS not connected"
		case depErr != nil:
			why = depErr.Error()
		default:
			if err := firstError(cctx, checks); err != nil {
				why = err.Error()
			}
		}
		cancel()
		rt.Health.SetReady(why == "", why)
		next := 2 * time.Second
		if why != "" {
			next = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			rt.Health.SetReady(false, "shutting down")
			return nil
		case <-time.After(next):
		}
	}
}

// RoleFunc adapts a function to Role.
type RoleFunc func(ctx context.Context, rt *Runtime) (func(ctx context.Context) error, []Check, error)

// Setup calls f.
func (f RoleFunc) Setup(ctx context.Context, rt *Runtime) (func(ctx context.Context) error, []Check, error) {
	return f(ctx, rt)
}
