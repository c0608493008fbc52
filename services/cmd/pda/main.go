// Command pda runs the privacy-preserving data aggregation services (docs/pda.md).
//
//	pda proxy        participant-facing ingress (mTLS) of the proxy domain
//	pda mixer        window-mode mixer of the proxy domain
//	pda oracle       decryption oracle of the proxy domain
//	pda db-frontend  DB front-end (decrypt and route by the ring)
//	pda db-shard     one DB shard (StatefulSet pod) on its own Redis
//	pda submit       participant CLI: submit a CSV of key[,value] with a progress bar
//	pda keygen       write a proxy or DB key file and print the public key
//	pda demo         everything in one process on an embedded NATS
//	pda probe        Kubernetes exec probe: GET <path> on the address in OBSCURA_ADDR_FILE
//
// Every flag has an environment fallback OBSCURA_PDA_<FLAG> (dashes become underscores).
// A configuration error (a bad flag, a malformed environment value, an invalid setting,
// an unreadable key or certificate) exits with status 2.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	pdacontract "github.com/obscura-iot/obscura/services/pkg/pda/contract"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"proxy": runProxy, "mixer": runMixer, "oracle": runOracle, "db-frontend": runFrontend,
		"db-shard": runShard, "submit": runSubmit, "keygen": runKeygen, "demo": runDemo, "probe": runProbe,
	}
	f := cmds[os.Args[1]]
	if f == nil {
		usage()
		os.Exit(2)
	}
	err := f(os.Args[2:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pda %s: %v\n", os.Args[1], err)
		if errors.Is(err, errConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pda proxy|mixer|oracle|db-frontend|db-shard|submit|keygen|demo|probe [flags]   (pda <cmd> -h for flags)")
}

// errConfig marks a configuration error: the process exits with status 2.
var errConfig = errors.New("invalid configuration")

// configErr marks err (if any) as a configuration error.
func configErr(err error) error {
	if err == nil || errors.Is(err, errConfig) {
		return err
	}
	return fmt.Errorf("%w: %w", errConfig, err)
}

// newFlags returns the flag set of a subcommand: every flag -x-y falls back to OBSCURA_PDA_X_Y.
func newFlags(cmd string) *envflag.Set { return envflag.New(cmd, "OBSCURA_PDA_") }

// parseFlags parses the command line of a subcommand that takes no positional arguments;
// a bad flag, a malformed environment value or a stray argument is a configuration error.
func parseFlags(f *envflag.Set, args []string) error {
	err := f.Parse(args)
	if err == nil && len(f.Args()) > 0 {
		err = fmt.Errorf("unexpected arguments %q", f.Args())
	}
	return configErr(err)
}

// common holds the flags every service role shares.
type common struct {
	natsURL, natsUser, natsPassword string
	metrics, logLevel, addrFile     string
	job                             jobFlags
}

type jobFlags struct {
	deployment, group, countMode, values, dbPub, proxyPub string
	tau, chunks                                           int
	window, grace                                         time.Duration
}

func (c *common) register(f *envflag.Set, user string) {
	f.String(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL")
	f.String(&c.natsUser, "nats-user", user, "NATS user (the domain's account)")
	f.String(&c.natsPassword, "nats-password", "", "NATS password")
	f.String(&c.metrics, "metrics-addr", ":9090", "serve /metrics /healthz /readyz here (empty: off)")
	f.String(&c.addrFile, "addr-file", "", "write the bound health= and metrics= address here, for a port-0 metrics address (hostNetwork); pda probe reads it", "OBSCURA_PDA_ADDR_FILE", "OBSCURA_ADDR_FILE")
	f.String(&c.logLevel, "log-level", "info", "debug|info|warn|error")
	c.job.register(f)
}

func (j *jobFlags) register(f *envflag.Set) {
	f.String(&j.deployment, "deployment", "obscura", "deployment id (AggregationJob name)")
	f.String(&j.group, "group", "ristretto255", "ristretto255|p256")
	f.Int(&j.tau, "threshold", 10, "τ")
	f.String(&j.countMode, "count-mode", "distinct_participants", "distinct_participants|tuples")
	f.Int(&j.chunks, "chunks", 1, "n_chunks of E_PRX(k) (1: IP addresses)")
	f.String(&j.values, "values", "", "value domain D, comma-separated (empty: count only)")
	f.String(&j.dbPub, "db-public-key", "", "h_DB (hex)")
	f.String(&j.proxyPub, "proxy-public-key", "", "h_PRX (hex)")
	f.Duration(&j.window, "window", time.Hour, "window length")
	f.Duration(&j.grace, "grace", 30*time.Second, "grace after a window closes")
}

func groupID(s string) (pda.GroupID, error) {
	switch s {
	case "ristretto255":
		return pda.Ristretto255, nil
	case "p256":
		return pda.P256, nil
	}
	return 0, fmt.Errorf("-group must be ristretto255 or p256, not %q", s)
}

func (j *jobFlags) build() (*pdaroles.Job, error) {
	g, err := groupID(j.group)
	if err != nil {
		return nil, err
	}
	job := &pdaroles.Job{DeploymentID: j.deployment, Group: g, Threshold: uint32(j.tau), Chunks: uint8(j.chunks),
		WindowLength: j.window, Grace: j.grace}
	switch j.countMode {
	case "distinct_participants":
		job.CountMode = pda.CountDistinctParticipants
	case "tuples":
		job.CountMode = pda.CountTuples
	default:
		return nil, fmt.Errorf("-count-mode must be distinct_participants or tuples")
	}
	if j.values != "" {
		for _, v := range strings.Split(j.values, ",") {
			x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
			if err != nil {
				return nil, fmt.Errorf("-values: %w", err)
			}
			job.Values = append(job.Values, uint16(x))
		}
	}
	if job.DBKey, err = hex.DecodeString(j.dbPub); err != nil {
		return nil, fmt.Errorf("-db-public-key: %w", err)
	}
	if job.ProxyKey, err = hex.DecodeString(j.proxyPub); err != nil {
		return nil, fmt.Errorf("-proxy-public-key: %w", err)
	}
	if j.tau < 1 || j.chunks < 1 || j.chunks > pda.MaxChunks {
		return nil, fmt.Errorf("-threshold ≥ 1 and -chunks in [1, %d] are required", pda.MaxChunks)
	}
	return job, job.Validate()
}

// service is what every long-running role gets after start-up.
type service struct {
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger
	reg    *prometheus.Registry
	health *telemetry.Health
	m      *pdaroles.Metrics
	js     jetstream.JetStream
	job    *pdaroles.Job
	group  *telemetry.Group
}

func start(role string, c *common) (*service, error) {
	job, err := c.job.build()
	if err != nil {
		return nil, configErr(err)
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	s := &service{cancel: cancel, log: telemetry.NewLogger(os.Stderr, role, c.logLevel), reg: telemetry.NewRegistry(),
		health: &telemetry.Health{}, job: job}
	s.m = pdaroles.NewMetrics(s.reg)
	s.group, s.ctx = telemetry.NewGroup(ctx)
	af, err := telemetry.NewAddrFile(c.addrFile)
	if err != nil {
		cancel()
		return nil, err
	}
	s.group.Go("observability", func(ctx context.Context) error {
		return telemetry.Serve(ctx, c.metrics, s.reg, s.health, s.log, telemetry.Publish(af, telemetry.AddrHealth, telemetry.AddrMetrics))
	})
	nc, err := nats.Connect(c.natsURL, nats.UserInfo(c.natsUser, c.natsPassword), nats.Name("pda-"+role), nats.MaxReconnects(-1))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connect to NATS %s: %w", c.natsURL, err)
	}
	s.group.Go("nats", func(ctx context.Context) error { <-ctx.Done(); nc.Drain(); return nil })
	s.js, _ = jetstream.New(nc)
	return s, nil
}

func (s *service) run(name string, f func(ctx context.Context) error) error {
	s.health.SetReady(true, "")
	s.group.Go(name, f)
	err := s.group.Wait()
	s.cancel()
	return err
}

func runProxy(args []string) error {
	f := newFlags("proxy")
	var c common
	c.register(f, pdacontract.ProxyUser)
	var (
		listen    string
		ks        keys.Source
		cert      string
		key       string
		ca        string
		parts     string
		redisAddr string
		quota     int
		rate      int
		maxBatch  int
	)
	f.String(&listen, "listen", ":8443", "HTTPS listen address")
	bindKeys(f, &ks, "/var/run/secrets/pda/proxy.json", "proxy key bundle (pda keygen -role proxy)")
	f.String(&cert, "tls-cert", "/var/run/secrets/pda/tls.crt", "server certificate")
	f.String(&key, "tls-key", "/var/run/secrets/pda/tls.key", "server key")
	f.String(&ca, "client-ca", "/var/run/secrets/pda/ca.crt", "CA of participant certificates")
	f.String(&parts, "participants", "", "allowed participant CNs, comma-separated")
	f.String(&redisAddr, "redis-addr", "127.0.0.1:6379", "the proxy domain's Redis")
	f.Int(&quota, "quota", 100000, "items per participant per window")
	f.Int(&rate, "rate", 5000, "items per participant per second")
	f.Int(&maxBatch, "max-batch", 1000, "items per request")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	cfg := pdaroles.IngressConfig{Listen: listen, Participants: map[string]bool{}, Quota: quota, Rate: rate, MaxBatch: maxBatch, SessionTTL: 2 * time.Hour}
	for _, p := range strings.Split(parts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Participants[p] = true
		}
	}
	if err := cfg.Validate(); err != nil {
		return configErr(err)
	}
	sec, err := loadProxySecrets(&ks)
	if err != nil {
		return err
	}
	tc, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return configErr(fmt.Errorf("server certificate: %w", err))
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return configErr(fmt.Errorf("client CA: %w", err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return configErr(errors.New("client CA: no certificate"))
	}
	s, err := start("pda-proxy", &c)
	if err != nil {
		return err
	}
	if err := pdaroles.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	store := pdaroles.NewRedisProxyStore(redis.NewClient(&redis.Options{Addr: redisAddr}))
	g, err := pdaroles.NewIngress(s.ctx, cfg, s.job, sec, s.js, store, s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("ingress", func(ctx context.Context) error {
		ln, err := (&netListen{}).listen(cfg.Listen)
		if err != nil {
			return err
		}
		return g.Serve(ctx, ln, &tls.Config{Certificates: []tls.Certificate{tc}, ClientCAs: pool})
	})
}

func runMixer(args []string) error {
	f := newFlags("mixer")
	var c common
	c.register(f, pdacontract.ProxyUser)
	var (
		ks    keys.Source
		chunk int
		poll  time.Duration
	)
	bindKeys(f, &ks, "/var/run/secrets/pda/proxy.json", "proxy key bundle")
	f.Int(&chunk, "chunk-items", 2000, "items per DB ingest message")
	f.Duration(&poll, "poll", 5*time.Second, "how often to look for windows to seal")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	cfg := pdaroles.MixerConfig{ChunkItems: chunk, Poll: poll}
	if err := cfg.Validate(); err != nil {
		return configErr(err)
	}
	sec, err := loadProxySecrets(&ks)
	if err != nil {
		return err
	}
	s, err := start("pda-mixer", &c)
	if err != nil {
		return err
	}
	if err := pdaroles.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	x, err := pdaroles.NewMixer(s.ctx, cfg, s.job, sec, s.js, s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("mixer", x.Run)
}

func runOracle(args []string) error {
	f := newFlags("oracle")
	var c common
	c.register(f, pdacontract.ProxyUser)
	var ks keys.Source
	bindKeys(f, &ks, "/var/run/secrets/pda/proxy.json", "proxy key bundle")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	sec, err := loadProxySecrets(&ks)
	if err != nil {
		return err
	}
	s, err := start("pda-oracle", &c)
	if err != nil {
		return err
	}
	if err := pdaroles.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	return s.run("oracle", pdaroles.NewOracle(s.job, sec, s.js, s.log, s.m).Run)
}

func runFrontend(args []string) error {
	f := newFlags("db-frontend")
	var c common
	c.register(f, pdacontract.DBUser)
	var (
		ks      keys.Source
		workers int
	)
	bindKeys(f, &ks, "/var/run/secrets/pda/db.json", "DB key bundle (pda keygen -role db)")
	f.Int(&workers, "workers", 2, "decrypting goroutines per chunk")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	sec, err := loadDBSecrets(&ks)
	if err != nil {
		return err
	}
	s, err := start("pda-db-frontend", &c)
	if err != nil {
		return err
	}
	if err := pdaroles.EnsureDBDomain(s.ctx, s.js); err != nil {
		return err
	}
	fe, err := pdaroles.NewFrontend(s.ctx, pdaroles.FrontendConfig{Workers: workers}, s.job, sec, s.js, s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("db-frontend", fe.Run)
}

func runShard(args []string) error {
	f := newFlags("db-shard")
	var c common
	c.register(f, pdacontract.DBUser)
	host, _ := os.Hostname()
	var (
		id        string
		redisAddr string
	)
	f.String(&id, "shard-id", host, "shard id (the StatefulSet pod name)")
	f.String(&redisAddr, "redis-addr", "127.0.0.1:6379", "this shard's own Redis")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	cfg := pdaroles.ShardConfig{ID: id, EvalRetry: 2 * time.Second}
	if err := cfg.Validate(); err != nil {
		return configErr(err)
	}
	s, err := start("pda-db-shard", &c)
	if err != nil {
		return err
	}
	if err := pdaroles.EnsureDBDomain(s.ctx, s.js); err != nil {
		return err
	}
	sh, err := pdaroles.NewShard(s.ctx, cfg, s.job, s.js, pdaroles.NewRedisShardStore(redis.NewClient(&redis.Options{Addr: redisAddr})), s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("db-shard", sh.Run)
}

func runKeygen(args []string) error {
	f := newFlags("keygen")
	var (
		role  string
		group string
		out   string
	)
	f.String(&role, "role", "proxy", "proxy|db")
	f.String(&group, "group", "ristretto255", "ristretto255|p256")
	f.String(&out, "out", "", "key file to write (mode 0600)")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	id, err := groupID(group)
	if err != nil {
		return configErr(err)
	}
	g, _ := pda.NewGroup(id)
	if out == "" {
		return configErr(errors.New("-out is required"))
	}
	var b, pub []byte
	switch role {
	case "proxy":
		s, err := pdaroles.GenerateProxySecrets(g)
		if err != nil {
			return err
		}
		b, err = pdaroles.MarshalProxySecrets(g, s)
		if err != nil {
			return err
		}
		pub = s.Keys.Oracle.PublicKey()
	case "db":
		s, err := pdaroles.GenerateDBSecrets(g)
		if err != nil {
			return err
		}
		b, err = pdaroles.MarshalDBSecrets(g, s)
		if err != nil {
			return err
		}
		pub = s.Key.PublicKey()
	default:
		return configErr(errors.New("-role must be proxy or db"))
	}
	if err := os.WriteFile(out, b, 0o600); err != nil {
		return err
	}
	fmt.Println(hex.EncodeToString(pub))
	return nil
}
