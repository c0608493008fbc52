package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	"github.com/obscura-iot/obscura/services/pkg/pps/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// The garbler's key sources.
const (
	sourceVault = "vault"
	sourceFile  = "file"
)

// garblerConfig is `pps garbler`'s configuration. The garbler binds no NATS flag: it has no
// NATS credentials (spec §5.3, §10 #10), so it uses the daemon's flag and port conventions
// without daemon.Runtime, which connects to NATS.
type garblerConfig struct {
	listen, tlsCert, tlsKey, clientCA  string
	reusePort                          bool
	pipelinesFile                      string
	functions                          map[string]bool // from pipelinesFile (declaredFunctions)
	redisAddr, redisPasswordFile       string
	seal, sealKeyFile, vaultSealKey    string
	identity, identityKeyFile, vaultID string
	vault                              roles.VaultConfig
	seedTTL                            time.Duration
	kkrtSessionTTL                     time.Duration
	chunkBytes                         int
	metricsAddr, healthAddr, addrFile  string
	logLevel                           string
	grace                              time.Duration
}

func (c *garblerConfig) bind(f *envflag.Set) {
	f.String(&c.listen, "listen", ":7443", "gRPC listen address for the broker (mutual TLS)")
	f.String(&c.pipelinesFile, "pipelines-file", "", "the garbler domain's pipelines file (the operator renders it from the SecurePipelines): only its functions are registered; empty registers whatever the broker relays")
	f.Bool(&c.reusePort, "reuse-port", false, "set SO_REUSEPORT on the gRPC listener, so several garblers (hostNetwork replicas, a rolling update) share one address")
	f.String(&c.tlsCert, "tls-cert", "/var/run/secrets/pps/tls.crt", "the garbler's server certificate (PEM)")
	f.String(&c.tlsKey, "tls-key", "/var/run/secrets/pps/tls.key", "its private key (PEM)")
	f.String(&c.clientCA, "client-ca", "/var/run/secrets/pps/broker-ca.crt", "the broker domain's CA: the only issuer of client certificates accepted")
	f.String(&c.redisAddr, "redis-addr", "127.0.0.1:6379", "the garbler's own Redis")
	f.String(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (none: no AUTH)")
	f.String(&c.seal, "seal", sourceVault, "how ratchet state is sealed in Redis: vault (Transit envelope encryption) or file (local XChaCha20-Poly1305 key)")
	f.String(&c.sealKeyFile, "seal-key-file", "", "with --seal file: the 32-byte sealing key (raw, hex or base64)")
	f.String(&c.vaultSealKey, "vault-seal-key", "pps-garbler-seal", "with --seal vault: the Transit key (aes256-gcm96) data keys are drawn from")
	f.String(&c.identity, "identity", sourceVault, "where the Ed25519 identity lives: vault (Transit key of type ed25519) or file")
	f.String(&c.identityKeyFile, "identity-key-file", "", "with --identity file: the Ed25519 seed (pps keys garbler)")
	f.String(&c.vaultID, "vault-identity-key", "pps-garbler-id", "with --identity vault: the Transit ed25519 key")
	v := &c.vault
	f.String(&v.Addr, "vault-addr", "", "Vault URL (with --seal vault or --identity vault)")
	f.String(&v.TokenFile, "vault-token-file", "", "file holding a Vault token (token auth; or --vault-role)")
	f.String(&v.Role, "vault-role", "", "Vault Kubernetes auth role (or --vault-token-file)")
	f.String(&v.AuthPath, "vault-auth-path", keys.DefaultAuthPath, "mount path of Vault's Kubernetes auth method")
	f.String(&v.JWTFile, "vault-jwt-file", keys.DefaultJWTFile, "service account token for the Kubernetes auth login")
	f.String(&v.TransitMount, "vault-transit-mount", roles.DefaultTransitMount, "mount path of Vault's Transit engine")
	f.Duration(&c.seedTTL, "seed-ttl", roles.DefaultSeedTTL, "how long retained round seeds live unless a function says otherwise (D8)")
	f.Duration(&c.kkrtSessionTTL, "kkrt-session-ttl", roles.DefaultKKRTSessionTTL, "how long a broker's KKRT consistency-check session lives without a check (D16b)")
	f.Int(&c.chunkBytes, "chunk-bytes", roles.DefaultChunkBytes, "garbled stream data message size (bytes)")
	f.String(&c.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, "Prometheus /metrics listen address")
	f.String(&c.healthAddr, "health-addr", daemon.DefaultHealthAddr, "/healthz and /readyz listen address")
	f.String(&c.addrFile, "addr-file", "", "write the bound health=, metrics= and grpc= addresses here (listen addresses with port 0); pps probe reads it")
	f.String(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	f.Duration(&c.grace, "shutdown-grace", 20*time.Second, "how long in-flight garblings may finish after SIGTERM")
}

func (c *garblerConfig) usesVault() bool { return c.seal == sourceVault || c.identity == sourceVault }

// validate checks the settings without reading anything.
func (c *garblerConfig) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		bad("--listen %q: %v", c.listen, err)
	}
	if c.tlsCert == "" || c.tlsKey == "" || c.clientCA == "" {
		bad("--tls-cert, --tls-key and --client-ca are required: the broker link is mutual TLS only")
	}
	if c.redisAddr == "" {
		bad("--redis-addr is required")
	}
	switch c.seal {
	case sourceFile:
		if c.sealKeyFile == "" {
			bad("--seal file needs --seal-key-file")
		}
	case sourceVault:
		if c.vaultSealKey == "" || strings.ContainsAny(c.vaultSealKey, "/ ") {
			bad("--seal vault needs --vault-seal-key, a Transit key name")
		}
		if c.sealKeyFile != "" {
			bad("--seal-key-file is for --seal file; with --seal vault the Transit key seals")
		}
	default:
		bad("--seal %q: want vault or file", c.seal)
	}
	switch c.identity {
	case sourceFile:
		if c.identityKeyFile == "" {
			bad("--identity file needs --identity-key-file")
		}
	case sourceVault:
		if c.vaultID == "" || strings.ContainsAny(c.vaultID, "/ ") {
			bad("--identity vault needs --vault-identity-key, a Transit key name")
		}
		if c.identityKeyFile != "" {
			bad("--identity-key-file is for --identity file; with --identity vault the Transit key signs")
		}
	default:
		bad("--identity %q: want vault or file", c.identity)
	}
	if c.usesVault() {
		if err := c.vault.Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if c.vault.Addr != "" || c.vault.TokenFile != "" || c.vault.Role != "" {
		bad("--vault-addr, --vault-token-file or --vault-role is set but neither --seal nor --identity is vault")
	}
	if c.seedTTL < time.Second || c.seedTTL > roles.MaxSeedTTL {
		bad("--seed-ttl %s: want 1s to %s", c.seedTTL, roles.MaxSeedTTL)
	}
	if c.kkrtSessionTTL < time.Second || c.kkrtSessionTTL > 7*24*time.Hour {
		bad("--kkrt-session-ttl %s: want 1s to 168h", c.kkrtSessionTTL)
	}
	if c.chunkBytes < roles.MinChunkBytes || c.chunkBytes > roles.MaxChunkBytes {
		bad("--chunk-bytes %d: want %d to %d", c.chunkBytes, roles.MinChunkBytes, roles.MaxChunkBytes)
	}
	for _, a := range []struct{ name, addr string }{{"--metrics-addr", c.metricsAddr}, {"--health-addr", c.healthAddr}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad("%s %q: %v", a.name, a.addr, err)
		}
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q must be debug, info, warn or error", c.logLevel)
	}
	if c.grace < 0 {
		bad("--shutdown-grace %s is negative", c.grace)
	}
	return daemon.JoinConfig(errs)
}

// garblerSecrets is what is read from files at start (before any network call); a missing
// or malformed file is a configuration error.
type garblerSecrets struct {
	tls           *tls.Config
	redisPassword string
	sealer        roles.Sealer // nil with --seal vault
	signer        roles.Signer // nil with --identity vault
}

func (c *garblerConfig) load() (*garblerSecrets, error) {
	var errs []error
	s := &garblerSecrets{}
	var err error
	if s.tls, err = roles.ServerTLS(c.tlsCert, c.tlsKey, c.clientCA); err != nil {
		errs = append(errs, err)
	}
	if c.redisPasswordFile != "" {
		b, err := os.ReadFile(c.redisPasswordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--redis-password-file: %w", err))
		}
		s.redisPassword = strings.TrimRight(string(b), "\r\n")
	}
	if c.seal == sourceFile {
		if s.sealer, err = roles.LoadFileSealer(c.sealKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--seal-key-file: %w", err))
		}
	}
	if c.identity == sourceFile {
		if s.signer, err = roles.LoadFileSigner(c.identityKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--identity-key-file: %w", err))
		}
	}
	if c.usesVault() {
		file, flag := c.vault.TokenFile, "--vault-token-file"
		if c.vault.Role != "" {
			file, flag = c.vault.JWTFile, "--vault-jwt-file"
		}
		if b, err := os.ReadFile(file); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
		} else if len(strings.TrimSpace(string(b))) == 0 {
			errs = append(errs, fmt.Errorf("%s %s is empty", flag, file))
		} else {
			clear(b)
		}
	}
	return s, daemon.JoinConfig(errs)
}

// declaredFunctions reads the garbler's pipelines file and compiles each program for its
// function id; nil for no file. A file that does not read, validate or compile is a
// configuration error.
func declaredFunctions(path string) (map[string]bool, error) {
	if path == "" {
		return nil, nil
	}
	pf, err := contract.ReadPipelines(path)
	if err != nil {
		return nil, daemon.ConfigError(fmt.Errorf("--pipelines-file: %w", err))
	}
	fns := map[string]bool{}
	for _, p := range pf.Pipelines {
		f, err := dsl.Compile(p.Source)
		if err != nil {
			return nil, daemon.ConfigError(fmt.Errorf("--pipelines-file: pipeline %q: %w", p.Name, err))
		}
		fns[f.ID] = true
	}
	return fns, nil
}

func runGarbler(args []string) error {
	f := daemon.NewFlags("garbler")
	var c garblerConfig
	c.bind(f)
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	sec, err := c.load()
	if err != nil {
		return err
	}
	if c.functions, err = declaredFunctions(c.pipelinesFile); err != nil {
		return err
	}
	log := telemetry.NewLogger(os.Stderr, "pps-garbler", c.logLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	health.SetReady(false, "starting")
	if err := health.Register(reg); err != nil {
		return err
	}
	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	af, err := telemetry.NewAddrFile(c.addrFile)
	if err != nil {
		return err
	}
	g, gctx := telemetry.NewGroup(ctx)
	metricsNames := []string{telemetry.AddrMetrics}
	if c.healthAddr == c.metricsAddr {
		metricsNames = append(metricsNames, telemetry.AddrHealth)
	}
	g.Go("metrics server", func(ctx context.Context) error {
		return telemetry.Serve(ctx, c.metricsAddr, reg, health, log, telemetry.Publish(af, metricsNames...))
	})
	if c.healthAddr != c.metricsAddr {
		g.Go("health server", func(ctx context.Context) error {
			return telemetry.Serve(ctx, c.healthAddr, reg, health, log, telemetry.Publish(af, telemetry.AddrHealth))
		})
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, Password: sec.redisPassword})
	defer rdb.Close()

	gb, transit, err := c.setup(gctx, log, rdb, sec, reg, health)
	if err != nil || gctx.Err() != nil {
		g.Stop()
		werr := g.Wait()
		if err == nil {
			err = werr
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ln, err := telemetry.Listen(gctx, c.listen, c.reusePort)
	if err != nil {
		g.Stop()
		_ = g.Wait()
		return fmt.Errorf("listen for gRPC on %s: %w", c.listen, err)
	}
	if err := af.Record(ln.Addr().String(), telemetry.AddrGRPC); err != nil {
		ln.Close()
		g.Stop()
		_ = g.Wait()
		return err
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(sec.tls)),
		// The largest consistency check pps accepts (KKRT: pps.MaxKKRTRequestSize; OPRF-PSI:
		// pps.MaxPSIElements positions of 36 bytes) and its answer; the parking day needs
		// 5.6 and 1.3 MB (KKRT), 3 and 5 MB (OPRF-PSI).
		grpc.MaxRecvMsgSize(roles.GarblerMaxRecvMsgSize()), grpc.MaxSendMsgSize(roles.GarblerMaxSendMsgSize()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	gb.Register(srv)
	var serving atomic.Bool
	g.Go("grpc server", func(ctx context.Context) error {
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-done:
				return
			}
			serving.Store(false)
			stopped := make(chan struct{})
			go func() { srv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(c.grace):
				log.Warn("in-flight calls did not finish within the shutdown grace; stopping them")
				srv.Stop()
			}
		}()
		serving.Store(true)
		err := srv.Serve(ln)
		close(done)
		return err
	})
	log.Info("garbler listening", "addr", ln.Addr().String(), "identity", hex.EncodeToString(gb.Identity()),
		"seal", c.seal, "identity_source", c.identity)
	// Each dependency is checked every time (obscura_dependency_up stays current for both).
	redisUp := health.Dependency("redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	vaultUp := func(context.Context) error { return nil }
	if transit != nil {
		vaultUp = health.Dependency("vault", transit.Ping)
	}
	g.Go("readiness", func(ctx context.Context) error {
		return watchReadiness(ctx, health, func(ctx context.Context) error {
			rerr, verr := redisUp(ctx), vaultUp(ctx)
			if !serving.Load() {
				return errors.New("gRPC listener not serving")
			}
			if rerr != nil {
				return fmt.Errorf("redis: %w", rerr)
			}
			return verr
		})
	})
	err = g.Wait()
	if err != nil && ctx.Err() == nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// setup logs in to Vault (when used), builds the sealer and the signer and checks Redis,
// retrying with backoff (readiness false) until they are there or the process is stopped:
// Vault and Redis may come up after the garbler.
func (c *garblerConfig) setup(ctx context.Context, log *slog.Logger, rdb *redis.Client, sec *garblerSecrets,
	reg *prometheus.Registry, health *telemetry.Health) (*roles.Garbler, *roles.VaultTransit, error) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		transit, sealer, signer, err := c.keys(sctx, sec)
		if err == nil {
			err = rdb.Ping(sctx).Err()
			if err != nil {
				err = fmt.Errorf("redis %s: %w", c.redisAddr, err)
			}
		}
		cancel()
		if err == nil {
			g, err := roles.NewGarbler(roles.GarblerOptions{Functions: c.functions, Redis: rdb, Sealer: sealer, Signer: signer, Logger: log,
				Registerer: reg, SeedTTL: c.seedTTL, ChunkBytes: c.chunkBytes, KKRTSessionTTL: c.kkrtSessionTTL})
			if err != nil {
				return nil, nil, daemon.ConfigError(err)
			}
			return g, transit, nil
		}
		health.SetReady(false, err.Error())
		log.Warn("setup not complete, retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
	return nil, nil, ctx.Err()
}

// keys returns the sealer and the signer: the local ones loaded at start, or Vault's.
func (c *garblerConfig) keys(ctx context.Context, sec *garblerSecrets) (*roles.VaultTransit, roles.Sealer, roles.Signer, error) {
	sealer, signer := sec.sealer, sec.signer
	if !c.usesVault() {
		return nil, sealer, signer, nil
	}
	transit, err := roles.NewVaultTransit(ctx, c.vault)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.seal == sourceVault {
		if sealer, err = roles.NewVaultSealer(ctx, transit, c.vaultSealKey, roles.VaultSealerOptions{}); err != nil {
			return nil, nil, nil, err
		}
	}
	if c.identity == sourceVault {
		if signer, err = roles.NewVaultSigner(ctx, transit, c.vaultID); err != nil {
			return nil, nil, nil, err
		}
	}
	return transit, sealer, signer, nil
}

// watchReadiness keeps /readyz in step with ready (Redis, Vault, the listener).
func watchReadiness(ctx context.Context, h *telemetry.Health, ready func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(cctx)
		cancel()
		why := ""
		if err != nil {
			why = err.Error()
		}
		h.SetReady(err == nil, why)
		next := 2 * time.Second
		if err != nil {
			next = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			h.SetReady(false, "shutting down")
			return nil
		case <-time.After(next):
		}
	}
}

// runKeys is `pps keys garbler --out <file>`: a fresh local Ed25519 identity for
// --identity file, written with mode 0600 (never overwriting); it prints the public key in
// hex, the value devices pin (D20).
func runKeys(args []string) error {
	if len(args) == 0 || args[0] != "garbler" {
		return daemon.ConfigError(errors.New("usage: pps keys garbler --out <file>"))
	}
	f := daemon.NewFlags("keys garbler")
	var out string
	f.String(&out, "out", "", "identity key file to create (mode 0600)")
	if err := daemon.ParseFlags(f, args[1:]); err != nil {
		return err
	}
	if out == "" {
		return daemon.ConfigError(errors.New("--out is required"))
	}
	pub, err := roles.GenerateIdentityFile(out)
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Println(hex.EncodeToString(pub))
	return nil
}
