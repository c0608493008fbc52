package main

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
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// daemon is what every role shares at run time.
type daemon struct {
	role    string
	common  *Common
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *roles.Metrics
	health  *telemetry.Health
	nc      *nats.Conn
	js      jetstream.JetStream
	rdb     *redis.Client
	addrs   *telemetry.AddrFile // nil without --addr-file
}

// checks are the readiness probes of a role after setup: streams and
// consumers that must exist.
type check func(ctx context.Context) error

func streamExists(js jetstream.JetStream, name string) check {
	return func(ctx context.Context) error {
		if _, err := js.Stream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		return nil
	}
}

func consumerExists(js jetstream.JetStream, stream, durable string) check {
	return func(ctx context.Context) error {
		if _, err := js.Consumer(ctx, stream, durable); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
		}
		return nil
	}
}

// runRole runs a parsed role configuration until SIGTERM/SIGINT.
func runRole(role string, cfg any) error {
	var common *Common
	var redisAddr string
	switch c := cfg.(type) {
	case *GatewayConfig:
		common, redisAddr = &c.Common, c.RedisAddr
	case *CoordinatorConfig:
		common, redisAddr = &c.Common, c.RedisAddr
	case *DecryptWorkerConfig:
		common = &c.Common
	case *EncoderConfig:
		common, redisAddr = &c.Common, c.RedisAddr
	case *ResponderConfig:
		common, redisAddr = &c.Common, c.RedisAddr
	case *ShufflerConfig:
		common = &c.Common
	case *VendorAgentConfig:
		common = &c.Common
	}
	d := &daemon{role: role, common: common, log: telemetry.NewLogger(os.Stderr, role, common.LogLevel), reg: telemetry.NewRegistry(), health: &telemetry.Health{}}
	d.metrics = roles.NewMetrics(d.reg)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mohito_role_info", Help: "The role this process runs (always 1)."}, []string{"role", "series"})
	d.reg.MustRegister(info)
	info.WithLabelValues(role, common.Deployment.Series).Set(1)
	d.health.SetReady(false, "starting")

	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	g, gctx := telemetry.NewGroup(ctx)
	af, err := telemetry.NewAddrFile(common.AddrFile)
	if err != nil {
		return err
	}
	d.addrs = af
	metricsNames := []string{telemetry.AddrMetrics}
	if common.HealthAddr == common.MetricsAddr {
		metricsNames = append(metricsNames, telemetry.AddrHealth)
	}
	g.Go("metrics server", func(ctx context.Context) error {
		return telemetry.Serve(ctx, common.MetricsAddr, d.reg, d.health, d.log, telemetry.Publish(af, metricsNames...))
	})
	if common.HealthAddr != common.MetricsAddr {
		g.Go("health server", func(ctx context.Context) error {
			return telemetry.Serve(ctx, common.HealthAddr, d.reg, d.health, d.log, telemetry.Publish(af, telemetry.AddrHealth))
		})
	}
	opts := []nats.Option{nats.Name("obscura-" + role), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(500 * time.Millisecond)}
	if common.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(common.NATSCreds))
	} else if common.NATSUser != "" {
		opts = append(opts, nats.UserInfo(common.NATSUser, common.natsPassword))
	}
	nc, err := nats.Connect(common.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", common.NATSURL, err)
	}
	d.nc = nc
	if d.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return err
	}
	if redisAddr != "" {
		d.rdb = redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
		defer d.rdb.Close()
	}
	d.log.Info("starting", "series", common.Deployment.Series, "vendors", common.Deployment.Params.Vendors, "nats", common.NATSURL)

	// Setup (streams, buckets, keys) is retried until it succeeds: NATS,
	// Redis or the other party may come up after this process.
	var run func(ctx context.Context) error
	var checks []check
	wait := 100 * time.Millisecond
	for gctx.Err() == nil {
		if nc.IsClosed() {
			// nats.go gives up after repeated authorization failures.
			return fmt.Errorf("NATS connection closed: %v", nc.LastError())
		}
		sctx, cancel := context.WithTimeout(gctx, 10*time.Second)
		run, checks, err = d.setup(sctx, cfg)
		cancel()
		if err == nil {
			break
		}
		d.health.SetReady(false, err.Error())
		d.log.Warn("setup not complete, retrying", "err", err)
		select {
		case <-gctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	if gctx.Err() == nil {
		g.Go(role, run)
		g.Go("readiness", func(ctx context.Context) error { return d.watchReadiness(ctx, checks) })
	}
	err = g.Wait()
	// Graceful shutdown: the consumers have stopped fetching; drain flushes
	// the acks and publishes still in flight before the connection closes.
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
	d.log.Info("stopped")
	return nil
}

// watchReadiness keeps /readyz in step with the connections and the
// streams and consumers the role needs.
func (d *daemon) watchReadiness(ctx context.Context, checks []check) error {
	for {
		if d.nc.IsClosed() {
			return fmt.Errorf("NATS connection closed: %v", d.nc.LastError())
		}
		why := ""
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if !d.nc.IsConnected() {
			why = "NATS not connected"
		} else if d.rdb != nil {
			if err := d.rdb.Ping(cctx).Err(); err != nil {
				why = "redis: " + err.Error()
			}
		}
		if why == "" {
			for _, c := range checks {
				if err := c(cctx); err != nil {
					why = err.Error()
					break
				}
			}
		}
		cancel()
		d.health.SetReady(why == "", why)
		next := 2 * time.Second
		if why != "" {
			next = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			d.health.SetReady(false, "shutting down")
			return nil
		case <-time.After(next):
		}
	}
}

func (d *daemon) store() roundstate.Store {
	// Keys live for the response deadline plus a generous margin (spec §10 TTL).
	return roundstate.NewRedis(d.rdb, 10*time.Minute)
}

// setup builds the role; it is retried until it succeeds.
func (d *daemon) setup(ctx context.Context, cfg any) (func(context.Context) error, []check, error) {
	if d.rdb != nil {
		if err := d.rdb.Ping(ctx).Err(); err != nil {
			return nil, nil, fmt.Errorf("redis: %w", err)
		}
	}
	dep := d.common.Deployment
	js := d.js
	switch c := cfg.(type) {
	case *GatewayConfig:
		if err := roles.EnsureIntegratorStreams(ctx, js); err != nil {
			return nil, nil, err
		}
		gw, err := roles.NewGateway(ctx, roles.GatewayConfig{Deployment: dep, JS: js, Store: d.store(), Tokens: c.tokens, Log: d.log, Metrics: d.metrics})
		if err != nil {
			return nil, nil, err
		}
		l, err := telemetry.Listen(ctx, c.GRPCAddr, c.ReusePort)
		if err != nil {
			return nil, nil, fmt.Errorf("listen for gRPC on %s: %w", c.GRPCAddr, err)
		}
		if err := d.addrs.Record(l.Addr().String(), telemetry.AddrGRPC); err != nil {
			l.Close()
			return nil, nil, err
		}
		srv := roles.NewGRPCServer()
		gw.Register(srv)
		d.log.Info("user API listening", "addr", l.Addr().String(), "users", len(c.tokens))
		run := func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				done := make(chan struct{})
				go func() { srv.GracefulStop(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					srv.Stop()
				}
			}()
			return srv.Serve(l)
		}
		return run, []check{streamExists(js, contract.StreamIntegratorIn)}, nil

	case *CoordinatorConfig:
		if err := roles.EnsureIntegratorStreams(ctx, js); err != nil {
			return nil, nil, err
		}
		announceAll := func(ctx context.Context) error {
			pk := c.Key.ring.PublicKeys()
			for v := range dep.Params.Vendors {
				if err := roles.AnnounceIntegratorKey(ctx, js, v, pk); err != nil {
					return fmt.Errorf("announce pk_I to vendor %d: %w", v, err)
				}
			}
			return nil
		}
		if err := announceAll(ctx); err != nil {
			return nil, nil, err
		}
		vkeys, err := roles.FetchVendorKeys(ctx, js, dep.Params)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for the vendors' keys: %w", err)
		}
		co, err := roles.NewCoordinator(ctx, roles.CoordinatorConfig{
			Deployment: dep, JS: js, Store: d.store(), Keys: c.Key.ring, VendorKeys: vkeys,
			ID: c.ReplicaID, MaxRounds: c.MaxRounds, Log: d.log, Metrics: d.metrics,
		})
		if err != nil {
			return nil, nil, err
		}
		// A newly active epoch is announced by the coordinator before the first round naming it.
		reload := c.Key.reloader(d, nil)
		run := func(ctx context.Context) error {
			go d.reannounce(ctx, announceAll)
			d.reloadKeys(ctx, reload)
			if err := co.Run(ctx); err != nil {
				return err
			}
			// --max-rounds reached: stay up (a Deployment would restart an
			// exited coordinator and open more rounds) until told to stop.
			<-ctx.Done()
			return nil
		}
		return run, []check{streamExists(js, contract.StreamIntegratorIn), streamExists(js, contract.StreamWork)}, nil

	case *DecryptWorkerConfig:
		if err := roles.EnsureIntegratorStreams(ctx, js); err != nil {
			return nil, nil, err
		}
		w, err := roles.NewDecryptWorker(ctx, roles.WorkerConfig{Deployment: dep, JS: js, Keys: c.Key.ring, Log: d.log, Metrics: d.metrics})
		if err != nil {
			return nil, nil, err
		}
		reload := c.Key.reloader(d, nil)
		run := func(ctx context.Context) error {
			d.reloadKeys(ctx, reload)
			return w.Run(ctx)
		}
		return run, []check{consumerExists(js, contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers)}, nil

	case *EncoderConfig:
		if err := roles.EnsureIntegratorStreams(ctx, js); err != nil {
			return nil, nil, err
		}
		e, err := roles.NewEncoder(ctx, roles.WorkerConfig{Deployment: dep, JS: js, Store: d.store(), Partition: c.partition, Log: d.log, Metrics: d.metrics})
		if err != nil {
			return nil, nil, err
		}
		d.log.Info("encoder partition", "partition", c.partition, "vendors", e.Vendors())
		var checks []check
		if len(e.Vendors()) > 0 {
			name := contract.EncoderConsumer(c.partition, dep.Encoders)
			checks = append(checks, consumerExists(js, contract.StreamWork, name), consumerExists(js, contract.StreamIntegratorIn, name+"-resp"))
		}
		return e.Run, checks, nil

	case *ResponderConfig:
		if err := roles.EnsureIntegratorStreams(ctx, js); err != nil {
			return nil, nil, err
		}
		r := roles.NewResponder(roles.WorkerConfig{Deployment: dep, JS: js, Store: d.store(), Log: d.log, Metrics: d.metrics})
		return r.Run, []check{consumerExists(js, contract.StreamWork, "responder"), consumerExists(js, contract.StreamIntegratorIn, "router")}, nil

	case *ShufflerConfig:
		if err := roles.EnsureVendorStreams(ctx, js, c.Vendor); err != nil {
			return nil, nil, err
		}
		announce := d.vendorAnnouncer(js, c.Vendor, c.Key.ring)
		if err := announce(ctx); err != nil {
			return nil, nil, fmt.Errorf("announce pk_V to the integrator: %w", err)
		}
		ipk, err := roles.FetchIntegratorKey(ctx, js, c.Vendor, dep.Params)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for the integrator's key: %w", err)
		}
		s, err := roles.NewShufflerService(ctx, roles.VendorConfig{Deployment: dep, Vendor: c.Vendor, NC: d.nc, JS: js, Keys: c.Key.ring, Integrator: ipk, FakePool: c.FakePool, ID: podName(), Log: d.log, Metrics: d.metrics})
		if err != nil {
			return nil, nil, err
		}
		reload := c.Key.reloader(d, d.announceOnActivate(announce))
		run := func(ctx context.Context) error {
			go d.reannounce(ctx, announce)
			d.reloadKeys(ctx, reload)
			return s.Run(ctx)
		}
		return run, []check{consumerExists(js, contract.StreamVendorIn, "shuffler")}, nil

	case *VendorAgentConfig:
		if err := roles.EnsureVendorStreams(ctx, js, c.Vendor); err != nil {
			return nil, nil, err
		}
		announce := d.vendorAnnouncer(js, c.Vendor, c.Key.ring)
		if err := announce(ctx); err != nil {
			return nil, nil, fmt.Errorf("announce pk_V to the integrator: %w", err)
		}
		a, err := roles.NewVendorAgent(ctx, roles.VendorConfig{Deployment: dep, Vendor: c.Vendor, NC: d.nc, JS: js, Devices: c.devices, ID: podName(), Log: d.log, Metrics: d.metrics})
		if err != nil {
			return nil, nil, err
		}
		d.log.Info("vendor agent", "vendor", c.Vendor, "devices", len(c.devices))
		reload := c.Key.reloader(d, d.announceOnActivate(announce))
		run := func(ctx context.Context) error {
			go d.reannounce(ctx, announce)
			d.reloadKeys(ctx, reload)
			return a.Run(ctx)
		}
		return run, []check{consumerExists(js, contract.StreamVendorIn, "agent")}, nil
	}
	return nil, nil, errors.New("unknown role configuration")
}

// vendorAnnouncer publishes the vendor's active public keys (read from the ring at each call, so
// a newly active epoch goes out with the next announcement).
func (d *daemon) vendorAnnouncer(js jetstream.JetStream, vendor int, ring *mohito.KeyRing) func(context.Context) error {
	return func(ctx context.Context) error { return roles.AnnounceVendorKey(ctx, js, vendor, ring.PublicKeys()) }
}

// announceOnActivate announces at once when an epoch becomes active, rather than at the next
// periodic re-announcement.
func (d *daemon) announceOnActivate(announce func(context.Context) error) func(context.Context, uint32) {
	return func(ctx context.Context, epoch uint32) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := announce(actx); err != nil && ctx.Err() == nil {
			d.log.Warn("announcing a new key epoch failed; the periodic re-announcement will retry", "epoch", epoch, "err", err)
		}
	}
}

// reloadKeys starts the live reload of a role's key ring (nil: disabled).
func (d *daemon) reloadKeys(ctx context.Context, r *roles.KeyReloader) {
	if r != nil {
		go func() { _ = r.Run(ctx) }()
	}
}

// reannounce re-publishes a key every roles.KeyAnnounceInterval so the
// directory outlives the inbox streams' retention.
func (d *daemon) reannounce(ctx context.Context, f func(context.Context) error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(roles.KeyAnnounceInterval):
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := f(actx); err != nil && ctx.Err() == nil {
			d.log.Warn("key re-announcement failed", "err", err)
		}
		cancel()
	}
}
