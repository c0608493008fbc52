package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/lois"
	"github.com/obscura-iot/obscura/services/pkg/lois/contract"
	"github.com/obscura-iot/obscura/services/pkg/lois/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// Seed stores of the registrar daemon.
const (
	seedStoreVault  = "vault"  // sessions kept in the LOIS_REGISTRAR bucket, seeds wrapped by Vault Transit
	seedStoreMemory = "memory" // seeds only in memory: a restart loses every session (devices HELLO again)
)

type registrarConfig struct {
	natsFlags
	metricsAddr, healthAddr, addrFile, logLevel string
	services, waitFor                           string
	n, maxN, partitions, streamReplicas         int
	lifetime, timeout, storeTTL                 time.Duration
	seedStore                                   string
	vault                                       roles.TransitConfig
	rekeyAfter                                  time.Duration
	rekeyStreams                                int
}

func (c *registrarConfig) validate() error {
	errs := append(c.natsFlags.validate(false), c.natsFlags.loadRecords(true)...)
	if c.url == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	for _, a := range []struct{ name, addr string }{{"--metrics-addr", c.metricsAddr}, {"--health-addr", c.healthAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %v", a.name, a.addr, err))
		}
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q must be debug, info, warn or error", c.logLevel))
	}
	if _, err := parseSIDs(c.services); err != nil {
		errs = append(errs, err)
	}
	if len(splitList(c.waitFor)) == 0 {
		errs = append(errs, errors.New("--wait-for is required: every cloud and server interface a session must be installed at (install before use)"))
	}
	if c.n < 1 || c.n > 1<<20 || c.maxN < 0 || c.maxN > 1<<20 {
		errs = append(errs, fmt.Errorf("--n %d and --max-n %d: want 1 to 2^20 (max-n 0: --n)", c.n, c.maxN))
	}
	if c.partitions < 1 || c.partitions > 256 {
		errs = append(errs, fmt.Errorf("--partitions %d: want 1 to 256", c.partitions))
	}
	if c.lifetime < time.Minute || c.timeout <= 0 || c.storeTTL < c.lifetime {
		errs = append(errs, fmt.Errorf("--lifetime ≥ 1m, --timeout > 0 and --store-ttl ≥ --lifetime (got %v, %v, %v)", c.lifetime, c.timeout, c.storeTTL))
	}
	if c.rekeyAfter < c.lifetime || c.rekeyStreams < 4*c.n {
		errs = append(errs, fmt.Errorf("--rekey-after must be ≥ --lifetime and --rekey-streams ≥ 4 × --n"))
	}
	if c.streamReplicas < 1 || c.streamReplicas > 5 {
		errs = append(errs, fmt.Errorf("--nats-replicas %d: want 1 to 5", c.streamReplicas))
	}
	switch c.seedStore {
	case seedStoreVault:
		if err := c.vault.Validate(); err != nil {
			errs = append(errs, err)
		}
	case seedStoreMemory:
	default:
		errs = append(errs, fmt.Errorf("--seed-store %q: want vault or memory", c.seedStore))
	}
	return daemon.JoinConfig(errs)
}

// runRegistrar is the registrar daemon (spec §3.2, §3.12, §10): it opens device sessions for
// HELLOs, grants upload epochs for EPOCH_REQs and download epochs for the SIs' low-water
// events, each installed at every replica in --wait-for before the device gets it, and with
// --seed-store vault keeps its sessions in the LOIS_REGISTRAR bucket with their seeds wrapped
// by Vault Transit, so that a restart carries on. One registrar per cloud (the single writer
// of the deduplicating table).
func runRegistrar(args []string) error {
	var c registrarConfig
	f := daemon.NewFlags("registrar")
	c.natsFlags.bind(f, false)
	c.natsFlags.bindRecords(f, true)
	f.String(&c.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, "Prometheus /metrics listen address")
	f.String(&c.healthAddr, "health-addr", daemon.DefaultHealthAddr, "/healthz and /readyz listen address")
	f.String(&c.addrFile, "addr-file", "", "write the bound health= and metrics= addresses here (port 0); lois probe reads it")
	f.String(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	f.String(&c.services, "services", "", "comma-separated service ids a HELLO may ask for")
	f.Int(&c.n, "n", 1024, "keystreams per service and direction of an epoch (a HELLO naming none)")
	f.Int(&c.maxN, "max-n", 0, "the most keystreams per epoch a HELLO may ask for (0: --n)")
	f.Int(&c.partitions, "partitions", 1, "SI replicas per service: the download partition count (spec §3.11)")
	f.Duration(&c.lifetime, "lifetime", time.Hour, "epoch lifetime")
	f.String(&c.waitFor, "wait-for", "", "comma-separated replica names whose install acks every session and epoch waits for")
	f.Duration(&c.timeout, "timeout", 10*time.Second, "how long one request waits for the replicas' acks")
	f.Int(&c.streamReplicas, "nats-replicas", 1, "replicas of the session stream and the registrar's bucket")
	f.Duration(&c.storeTTL, "store-ttl", 26*time.Hour, "a stored session lives this long after its last grant")
	f.String(&c.seedStore, "seed-store", seedStoreVault, "vault: sessions stored with Vault-wrapped seeds (a restart carries on); memory: seeds in memory only")
	f.String(&c.vault.Addr, "vault-addr", "", "Vault address (--seed-store vault)")
	f.String(&c.vault.TokenFile, "vault-token-file", "", "file holding a Vault token allowed transit encrypt/decrypt with the seed key")
	f.String(&c.vault.Role, "vault-role", "", "Kubernetes auth role (instead of --vault-token-file)")
	f.String(&c.vault.AuthPath, "vault-auth-path", "kubernetes", "Kubernetes auth mount")
	f.String(&c.vault.TransitMount, "vault-transit-mount", "transit", "Transit engine mount")
	f.String(&c.vault.Key, "vault-transit-key", "lois-seeds", "Transit key the seeds are wrapped under")
	f.Duration(&c.rekeyAfter, "rekey-after", 24*time.Hour, "a seed's age at which a grant is refused and the device must HELLO again")
	f.Int(&c.rekeyStreams, "rekey-streams", 1<<32, "keystreams derived from one seed after which the device must HELLO again")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if c.maxN == 0 {
		c.maxN = c.n
	}
	log := telemetry.NewLogger(os.Stderr, "lois-registrar", c.logLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	health.SetReady(false, "starting")
	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	af, err := telemetry.NewAddrFile(c.addrFile)
	if err != nil {
		return err
	}
	m := roles.NewMetrics(reg)
	served := roles.NewRegistrarMetrics(reg)
	var wrapper *roles.TransitSeeds
	if c.seedStore == seedStoreVault {
		vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		wrapper, err = roles.NewTransitSeeds(vctx, c.vault)
		cancel()
		if err != nil {
			return err
		}
	}
	// Ready once serving (ServeControl) and while NATS is connected.
	var serving atomic.Bool
	var reensure atomic.Value // func(): ensure the session stream again
	up := func(*nats.Conn) {
		if serving.Load() {
			health.SetReady(true, "")
		}
	}
	reconnected := func(nc *nats.Conn) {
		if f, ok := reensure.Load().(func()); ok {
			go f()
		}
		up(nc)
	}
	js, closeNC, err := c.connect(nats.ConnectHandler(up), nats.ReconnectHandler(reconnected),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { health.SetReady(false, "NATS not connected") }))
	if err != nil {
		return err
	}
	defer closeNC()
	sids, _ := parseSIDs(c.services)
	table, err := lois.NewDVT(lois.DVTConfig{TableCapacity: 1 << 16, Dedup: true})
	if err != nil {
		return err
	}
	r := &roles.Registrar{JS: js, Cloud: c.cloud, Table: table, Replicas: splitList(c.waitFor), Metrics: m, Served: served, Records: c.records,
		Rekey:               lois.RekeyLimits{Seconds: int64(c.rekeyAfter / time.Second), Streams: uint64(c.rekeyStreams)},
		DeviceLinksOverNATS: true, AwaitReady: true,
		Policy: roles.HelloPolicy{Services: sids, N: uint32(c.n), MaxN: uint32(c.maxN), Lifetime: c.lifetime, Partitions: c.partitions}}
	g, _ := telemetry.NewGroup(ctx)
	names := []string{telemetry.AddrMetrics}
	if c.healthAddr == c.metricsAddr {
		names = append(names, telemetry.AddrHealth)
	} else {
		g.Go("health server", func(ctx context.Context) error {
			return telemetry.Serve(ctx, c.healthAddr, reg, health, log, telemetry.Publish(af, telemetry.AddrHealth))
		})
	}
	g.Go("metrics server", func(ctx context.Context) error {
		return telemetry.Serve(ctx, c.metricsAddr, reg, health, log, telemetry.Publish(af, names...))
	})
	g.Go("registrar", func(ctx context.Context) error {
		defer health.SetReady(false, "shutting down")
		health.SetReady(false, "restoring sessions")
		sctx, cancel := context.WithTimeout(ctx, max(c.timeout+30*time.Second, 2*time.Minute))
		defer cancel()
		// NATS may be restarting (the reloader restarts it to load the gateway's account):
		// the stream and the store are ensured until they are there or the start times out.
		if err := untilDone(sctx, js.Conn(), func(ctx context.Context) error {
			return roles.EnsureSessionStream(ctx, js, c.streamReplicas, c.storeTTL)
		}); err != nil {
			return err
		}
		if wrapper != nil {
			if err := untilDone(sctx, js.Conn(), func(ctx context.Context) (err error) {
				r.Store, err = roles.EnsureRegistrarStore(ctx, js, c.storeTTL)
				return err
			}); err != nil {
				return err
			}
			r.Wrapper = wrapper
		}
		// The session stream is on memory storage: a NATS server that restarts comes back
		// without it, so every reconnect ensures it again (records published since are kept;
		// the replicas rebuild from what the stream then holds).
		reensure.Store(func() {
			if err := untilDone(ctx, js.Conn(), func(ctx context.Context) error {
				return roles.EnsureSessionStream(ctx, js, c.streamReplicas, c.storeTTL)
			}); err != nil && ctx.Err() == nil {
				log.Warn("session stream not ensured after a reconnect", "err", err)
			}
		})
		n, err := r.Restore(sctx, log)
		if err != nil {
			return err
		}
		served.Sessions.Set(float64(n))
		log.Info("registrar running", "cloud", c.cloud, "services", len(sids), "replicas", len(r.Replicas),
			"seed_store", c.seedStore, "sessions_restored", n)
		return r.ServeControl(ctx, c.timeout, log, func() {
			serving.Store(true)
			if js.Conn().IsConnected() {
				health.SetReady(true, "")
			}
		})
	})
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
}

// untilDone runs ensure until it succeeds, once a second (each try bounded by 10 s), until
// ctx ends; a closed connection (refused credentials) ends it at once.
func untilDone(ctx context.Context, nc *nats.Conn, ensure func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := ensure(tctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case nc.IsClosed():
			return fmt.Errorf("%w (the NATS connection is closed: are the credentials accepted?)", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// runHello is a device's HELLO to the registrar daemon: it writes the device's keys file
// (with the session's control key) once the session is installed at every replica.
func runHello(args []string) error {
	var c natsFlags
	var outDir, services, deviceIP, deviceWire string
	var n int
	var timeout time.Duration
	f := daemon.NewFlags("hello")
	c.bind(f, false)
	f.String(&outDir, "out-dir", "", "directory the device's keys file (di.json) is written to")
	f.String(&services, "services", "", "comma-separated service ids")
	f.String(&deviceIP, "device-ip", "", "the device's address inside the LOIS packets")
	f.String(&deviceWire, "device-wire", "", "the DI's wire address (ip:port)")
	f.Int(&n, "n", 0, "keystreams per service and direction (0: the registrar's)")
	f.Duration(&timeout, "timeout", 30*time.Second, "how long to wait for the registrar")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	errs := c.validate(false)
	if c.url == "" {
		errs = append(errs, errors.New("--nats-url is required"))
	}
	sids, err := parseSIDs(services)
	if err != nil {
		errs = append(errs, err)
	}
	if a, err := netip.ParseAddr(deviceIP); err != nil || !a.Is4() {
		errs = append(errs, fmt.Errorf("--device-ip %q: want an IPv4 address", deviceIP))
	}
	if _, err := netip.ParseAddrPort(deviceWire); err != nil {
		errs = append(errs, fmt.Errorf("--device-wire %q: %v", deviceWire, err))
	}
	if outDir == "" || n < 0 {
		errs = append(errs, errors.New("--out-dir is required and --n must not be negative"))
	}
	if err := daemon.JoinConfig(errs); err != nil {
		return err
	}
	js, closeNC, err := c.connect()
	if err != nil {
		return err
	}
	defer closeNC()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	keys, err := roles.Hello(ctx, js.Conn(), c.cloud, contract.HelloRequest{DeviceIP: deviceIP, DeviceWire: deviceWire, Services: sids, N: uint32(n)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return err
	}
	if err := contract.WriteKeys(filepath.Join(outDir, "di.json"), keys); err != nil {
		return err
	}
	fmt.Printf("session %s opened\n", keys.Session)
	return nil
}
