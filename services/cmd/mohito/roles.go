package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// roleEnv is what every Mohito role gets at setup: the daemon runtime, the deployment, the
// Mohito metrics and, for the integrator's stateful roles, its Redis.
type roleEnv struct {
	*daemon.Runtime
	dep     roles.Deployment
	metrics *roles.Metrics
	rdb     *redis.Client // nil for roles without --redis-addr
}

// roleConfig is a role's *…Config: its flags, checked without I/O (validate), then the files
// it names read (load), then the role built on the runtime (setup, retried by the daemon).
type roleConfig interface {
	validate() []error
	load() []error
	common() *Common
	redis() string
	setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error)
}

// runRole runs a parsed role configuration until SIGTERM/SIGINT.
func runRole(role string, cfg roleConfig) error {
	common := cfg.common()
	rt := daemon.New(role, &common.Common)
	d := &roleEnv{Runtime: rt, dep: common.Deployment, metrics: roles.NewMetrics(rt.Registry)}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mohito_role_info", Help: "The role this process runs (always 1)."}, []string{"role", "series"})
	rt.Registry.MustRegister(info)
	info.WithLabelValues(role, common.Deployment.Series).Set(1)
	if addr := cfg.redis(); addr != "" {
		d.rdb = redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		defer d.rdb.Close()
		rt.AddDependency("redis", func(ctx context.Context) error {
			if err := d.rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			return nil
		})
	}
	rt.Log.Info("starting", "series", common.Deployment.Series, "vendors", common.Deployment.Params.Vendors, "nats", common.NATSURL)
	return rt.Run(daemon.RoleFunc(func(ctx context.Context, _ *daemon.Runtime) (func(context.Context) error, []daemon.Check, error) {
		return cfg.setup(ctx, d)
	}))
}

func (d *roleEnv) store() roundstate.Store {
	// Keys live for the response deadline plus a generous margin (spec §10 TTL).
	return roundstate.NewRedis(d.rdb, 10*time.Minute)
}

func (c *GatewayConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureIntegratorStreams(ctx, js, &dep); err != nil {
		return nil, nil, err
	}
	gw, err := roles.NewGateway(ctx, roles.GatewayConfig{Deployment: dep, JS: js, Store: d.store(), Tokens: c.tokens, Log: d.Log, Metrics: d.metrics})
	if err != nil {
		return nil, nil, err
	}
	l, err := telemetry.Listen(ctx, c.GRPCAddr, c.ReusePort)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for gRPC on %s: %w", c.GRPCAddr, err)
	}
	if err := d.Addrs.Record(l.Addr().String(), telemetry.AddrGRPC); err != nil {
		l.Close()
		return nil, nil, err
	}
	srv := roles.NewGRPCServer()
	gw.Register(srv)
	d.Log.Info("user API listening", "addr", l.Addr().String(), "users", len(c.tokens))
	run := func(ctx context.Context) error {
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-ctx.Done()
			done := make(chan struct{})
			go func() { srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				srv.Stop()
			}
			gw.Close() // publishes the M2 batches still waiting
		}()
		err := srv.Serve(l)
		if ctx.Err() == nil { // served no more on its own: nothing will stop the goroutine's wait
			gw.Close()
			return err
		}
		<-stopped
		return err
	}
	return run, []daemon.Check{daemon.StreamExists(js, contract.StreamIntegratorIn)}, nil
}

func (c *CoordinatorConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureIntegratorStreams(ctx, js, &dep); err != nil {
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
		ID: c.ReplicaID, MaxRounds: c.MaxRounds, Log: d.Log, Metrics: d.metrics,
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
	return run, []daemon.Check{daemon.StreamExists(js, contract.StreamIntegratorIn), daemon.StreamExists(js, contract.StreamWork)}, nil
}

func (c *DecryptWorkerConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureIntegratorStreams(ctx, js, &dep); err != nil {
		return nil, nil, err
	}
	w, err := roles.NewDecryptWorker(ctx, roles.WorkerConfig{Deployment: dep, JS: js, Keys: c.Key.ring, Log: d.Log, Metrics: d.metrics})
	if err != nil {
		return nil, nil, err
	}
	reload := c.Key.reloader(d, nil)
	run := func(ctx context.Context) error {
		d.reloadKeys(ctx, reload)
		return w.Run(ctx)
	}
	return run, []daemon.Check{daemon.ConsumerExists(js, contract.StreamIntegratorIn, contract.ConsumerDecryptWorkers)}, nil
}

func (c *EncoderConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureIntegratorStreams(ctx, js, &dep); err != nil {
		return nil, nil, err
	}
	e, err := roles.NewEncoder(ctx, roles.WorkerConfig{Deployment: dep, JS: js, Store: d.store(), Partition: c.partition, Log: d.Log, Metrics: d.metrics})
	if err != nil {
		return nil, nil, err
	}
	d.Log.Info("encoder partition", "partition", c.partition, "vendors", e.Vendors())
	var checks []daemon.Check
	if len(e.Vendors()) > 0 {
		name := contract.EncoderConsumer(c.partition, dep.Encoders)
		checks = append(checks, daemon.ConsumerExists(js, contract.StreamWork, name), daemon.ConsumerExists(js, contract.StreamIntegratorIn, name+"-resp"))
	}
	return e.Run, checks, nil
}

func (c *ResponderConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureIntegratorStreams(ctx, js, &dep); err != nil {
		return nil, nil, err
	}
	r := roles.NewResponder(roles.WorkerConfig{Deployment: dep, JS: js, Store: d.store(), Log: d.Log, Metrics: d.metrics})
	return r.Run, []daemon.Check{daemon.ConsumerExists(js, contract.StreamWork, contract.ConsumerResponder), daemon.ConsumerExists(js, contract.StreamIntegratorIn, contract.ConsumerRouter)}, nil
}

func (c *ShufflerConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureVendorStreams(ctx, js, c.Vendor, &dep); err != nil {
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
	s, err := roles.NewShufflerService(ctx, roles.VendorConfig{Deployment: dep, Vendor: c.Vendor, NC: d.NC, JS: js, Keys: c.Key.ring, Integrator: ipk, FakePool: c.FakePool, ID: podName(), Log: d.Log, Metrics: d.metrics})
	if err != nil {
		return nil, nil, err
	}
	reload := c.Key.reloader(d, d.announceOnActivate(announce))
	run := func(ctx context.Context) error {
		go d.reannounce(ctx, announce)
		d.reloadKeys(ctx, reload)
		return s.Run(ctx)
	}
	return run, []daemon.Check{daemon.ConsumerExists(js, contract.StreamVendorIn, "shuffler")}, nil
}

func (c *VendorAgentConfig) setup(ctx context.Context, d *roleEnv) (func(context.Context) error, []daemon.Check, error) {
	dep, js := d.dep, d.JS
	if err := roles.EnsureVendorStreams(ctx, js, c.Vendor, &dep); err != nil {
		return nil, nil, err
	}
	announce := d.vendorAnnouncer(js, c.Vendor, c.Key.ring)
	if err := announce(ctx); err != nil {
		return nil, nil, fmt.Errorf("announce pk_V to the integrator: %w", err)
	}
	a, err := roles.NewVendorAgent(ctx, roles.VendorConfig{Deployment: dep, Vendor: c.Vendor, NC: d.NC, JS: js, Devices: c.devices,
		DeviceRate: c.DeviceRate, DeviceBurst: c.DeviceBurst, ID: podName(), Log: d.Log, Metrics: d.metrics})
	if err != nil {
		return nil, nil, err
	}
	d.Log.Info("vendor agent", "vendor", c.Vendor, "devices", len(c.devices))
	reload := c.Key.reloader(d, d.announceOnActivate(announce))
	run := func(ctx context.Context) error {
		go d.reannounce(ctx, announce)
		d.reloadKeys(ctx, reload)
		return a.Run(ctx)
	}
	return run, []daemon.Check{daemon.ConsumerExists(js, contract.StreamVendorIn, "agent")}, nil
}

// vendorAnnouncer publishes the vendor's active public keys (read from the ring at each call, so
// a newly active epoch goes out with the next announcement).
func (d *roleEnv) vendorAnnouncer(js jetstream.JetStream, vendor int, ring *mohito.KeyRing) func(context.Context) error {
	return func(ctx context.Context) error { return roles.AnnounceVendorKey(ctx, js, vendor, ring.PublicKeys()) }
}

// announceOnActivate announces at once when an epoch becomes active, rather than at the next
// periodic re-announcement.
func (d *roleEnv) announceOnActivate(announce func(context.Context) error) func(context.Context, uint32) {
	return func(ctx context.Context, epoch uint32) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := announce(actx); err != nil && ctx.Err() == nil {
			d.Log.Warn("announcing a new key epoch failed; the periodic re-announcement will retry", "epoch", epoch, "err", err)
		}
	}
}

// reloadKeys starts the live reload of a role's key ring (nil: disabled).
func (d *roleEnv) reloadKeys(ctx context.Context, r *roles.KeyReloader) {
	if r != nil {
		go func() { _ = r.Run(ctx) }()
	}
}

// reannounce re-publishes a key every roles.KeyAnnounceInterval so the
// directory outlives the inbox streams' retention.
func (d *roleEnv) reannounce(ctx context.Context, f func(context.Context) error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(roles.KeyAnnounceInterval):
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := f(actx); err != nil && ctx.Err() == nil {
			d.Log.Warn("key re-announcement failed", "err", err)
		}
		cancel()
	}
}
