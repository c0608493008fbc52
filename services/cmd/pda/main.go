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
//
// Every flag has an environment fallback OBSCURA_PDA_<FLAG> (dashes become underscores).
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

	"github.com/obscura-iot/obscura/services/pkg/pda"
	"github.com/obscura-iot/obscura/services/pkg/pdasvc"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"proxy": runProxy, "mixer": runMixer, "oracle": runOracle, "db-frontend": runFrontend,
		"db-shard": runShard, "submit": runSubmit, "keygen": runKeygen, "demo": runDemo,
	}
	f := cmds[os.Args[1]]
	if f == nil {
		usage()
		os.Exit(2)
	}
	if err := f(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "pda:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pda proxy|mixer|oracle|db-frontend|db-shard|submit|keygen|demo [flags]   (pda <cmd> -h for flags)")
}

func env(name, def string) string {
	if v, ok := os.LookupEnv("OBSCURA_PDA_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(env(name, strconv.Itoa(def))); err == nil {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(env(name, def.String())); err == nil {
		return v
	}
	return def
}

// common holds the flags every service role shares.
type common struct {
	natsURL, natsUser, natsPassword string
	metrics, logLevel               string
	job                             jobFlags
}

type jobFlags struct {
	deployment, group, countMode, values, dbPub, proxyPub string
	tau, chunks                                           int
	window, grace                                         time.Duration
}

func (c *common) register(fs *flag.FlagSet, user string) {
	fs.StringVar(&c.natsURL, "nats-url", env("nats-url", "nats://127.0.0.1:4222"), "NATS URL")
	fs.StringVar(&c.natsUser, "nats-user", env("nats-user", user), "NATS user (the domain's account)")
	fs.StringVar(&c.natsPassword, "nats-password", env("nats-password", ""), "NATS password")
	fs.StringVar(&c.metrics, "metrics-addr", env("metrics-addr", ":9090"), "serve /metrics /healthz /readyz here (empty: off)")
	fs.StringVar(&c.logLevel, "log-level", env("log-level", "info"), "debug|info|warn|error")
	c.job.register(fs)
}

func (j *jobFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&j.deployment, "deployment", env("deployment", "obscura"), "deployment id (AggregationJob name)")
	fs.StringVar(&j.group, "group", env("group", "ristretto255"), "ristretto255|p256")
	fs.IntVar(&j.tau, "threshold", envInt("threshold", 10), "τ")
	fs.StringVar(&j.countMode, "count-mode", env("count-mode", "distinct_participants"), "distinct_participants|tuples")
	fs.IntVar(&j.chunks, "chunks", envInt("chunks", 1), "n_chunks of E_PRX(k) (1: IP addresses)")
	fs.StringVar(&j.values, "values", env("values", ""), "value domain D, comma-separated (empty: count only)")
	fs.StringVar(&j.dbPub, "db-public-key", env("db-public-key", ""), "h_DB (hex)")
	fs.StringVar(&j.proxyPub, "proxy-public-key", env("proxy-public-key", ""), "h_PRX (hex)")
	fs.DurationVar(&j.window, "window", envDur("window", time.Hour), "window length")
	fs.DurationVar(&j.grace, "grace", envDur("grace", 30*time.Second), "grace after a window closes")
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

func (j *jobFlags) build() (*pdasvc.Job, error) {
	g, err := groupID(j.group)
	if err != nil {
		return nil, err
	}
	job := &pdasvc.Job{DeploymentID: j.deployment, Group: g, Threshold: uint32(j.tau), Chunks: uint8(j.chunks),
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
	if j.tau < 1 || j.chunks < 1 || j.chunks > 255 {
		return nil, errors.New("-threshold ≥ 1 and -chunks in [1, 16] are required")
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
	m      *pdasvc.Metrics
	js     jetstream.JetStream
	job    *pdasvc.Job
	group  *telemetry.Group
}

func start(role string, c *common) (*service, error) {
	job, err := c.job.build()
	if err != nil {
		return nil, err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	s := &service{cancel: cancel, log: telemetry.NewLogger(os.Stderr, role, c.logLevel), reg: telemetry.NewRegistry(),
		health: &telemetry.Health{}, job: job}
	s.m = pdasvc.NewMetrics(s.reg)
	s.group, s.ctx = telemetry.NewGroup(ctx)
	s.group.Go("observability", func(ctx context.Context) error { return telemetry.Serve(ctx, c.metrics, s.reg, s.health, s.log) })
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
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var c common
	c.register(fs, pdasvc.ProxyUser)
	listen := fs.String("listen", env("listen", ":8443"), "HTTPS listen address")
	keys := fs.String("keys", env("keys", "/var/run/secrets/pda/proxy.json"), "proxy key file (pda keygen -role proxy)")
	cert := fs.String("tls-cert", env("tls-cert", "/var/run/secrets/pda/tls.crt"), "server certificate")
	key := fs.String("tls-key", env("tls-key", "/var/run/secrets/pda/tls.key"), "server key")
	ca := fs.String("client-ca", env("client-ca", "/var/run/secrets/pda/ca.crt"), "CA of participant certificates")
	parts := fs.String("participants", env("participants", ""), "allowed participant CNs, comma-separated")
	redisAddr := fs.String("redis-addr", env("redis-addr", "127.0.0.1:6379"), "the proxy domain's Redis")
	quota := fs.Int("quota", envInt("quota", 100000), "items per participant per window")
	rate := fs.Int("rate", envInt("rate", 5000), "items per participant per second")
	maxBatch := fs.Int("max-batch", envInt("max-batch", 1000), "items per request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := pdasvc.IngressConfig{Listen: *listen, Participants: map[string]bool{}, Quota: *quota, Rate: *rate, MaxBatch: *maxBatch, SessionTTL: 2 * time.Hour}
	for _, p := range strings.Split(*parts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Participants[p] = true
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	sec, _, err := pdasvc.LoadProxySecrets(*keys)
	if err != nil {
		return err
	}
	tc, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		return fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return errors.New("client CA: no certificate")
	}
	s, err := start("pda-proxy", &c)
	if err != nil {
		return err
	}
	if err := pdasvc.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	store := pdasvc.NewRedisProxyStore(redis.NewClient(&redis.Options{Addr: *redisAddr}))
	g, err := pdasvc.NewIngress(s.ctx, cfg, s.job, sec, s.js, store, s.log, s.m)
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
	fs := flag.NewFlagSet("mixer", flag.ContinueOnError)
	var c common
	c.register(fs, pdasvc.ProxyUser)
	keys := fs.String("keys", env("keys", "/var/run/secrets/pda/proxy.json"), "proxy key file")
	chunk := fs.Int("chunk-items", envInt("chunk-items", 2000), "items per DB ingest message")
	poll := fs.Duration("poll", envDur("poll", 5*time.Second), "how often to look for windows to seal")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := pdasvc.MixerConfig{ChunkItems: *chunk, Poll: *poll}
	if err := cfg.Validate(); err != nil {
		return err
	}
	sec, _, err := pdasvc.LoadProxySecrets(*keys)
	if err != nil {
		return err
	}
	s, err := start("pda-mixer", &c)
	if err != nil {
		return err
	}
	if err := pdasvc.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	x, err := pdasvc.NewMixer(s.ctx, cfg, s.job, sec, s.js, s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("mixer", x.Run)
}

func runOracle(args []string) error {
	fs := flag.NewFlagSet("oracle", flag.ContinueOnError)
	var c common
	c.register(fs, pdasvc.ProxyUser)
	keys := fs.String("keys", env("keys", "/var/run/secrets/pda/proxy.json"), "proxy key file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sec, _, err := pdasvc.LoadProxySecrets(*keys)
	if err != nil {
		return err
	}
	s, err := start("pda-oracle", &c)
	if err != nil {
		return err
	}
	if err := pdasvc.EnsureProxyDomain(s.ctx, s.js, 2*s.job.WindowLength+s.job.Grace); err != nil {
		return err
	}
	return s.run("oracle", pdasvc.NewOracle(s.job, sec, s.js, s.log, s.m).Run)
}

func runFrontend(args []string) error {
	fs := flag.NewFlagSet("db-frontend", flag.ContinueOnError)
	var c common
	c.register(fs, pdasvc.DBUser)
	keys := fs.String("keys", env("keys", "/var/run/secrets/pda/db.json"), "DB key file (pda keygen -role db)")
	workers := fs.Int("workers", envInt("workers", 2), "decrypting goroutines per chunk")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sec, _, err := pdasvc.LoadDBSecrets(*keys)
	if err != nil {
		return err
	}
	s, err := start("pda-db-frontend", &c)
	if err != nil {
		return err
	}
	if err := pdasvc.EnsureDBDomain(s.ctx, s.js); err != nil {
		return err
	}
	f, err := pdasvc.NewFrontend(s.ctx, pdasvc.FrontendConfig{Workers: *workers}, s.job, sec, s.js, s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("db-frontend", f.Run)
}

func runShard(args []string) error {
	fs := flag.NewFlagSet("db-shard", flag.ContinueOnError)
	var c common
	c.register(fs, pdasvc.DBUser)
	host, _ := os.Hostname()
	id := fs.String("shard-id", env("shard-id", host), "shard id (the StatefulSet pod name)")
	redisAddr := fs.String("redis-addr", env("redis-addr", "127.0.0.1:6379"), "this shard's own Redis")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := pdasvc.ShardConfig{ID: *id, EvalRetry: 2 * time.Second}
	if err := cfg.Validate(); err != nil {
		return err
	}
	s, err := start("pda-db-shard", &c)
	if err != nil {
		return err
	}
	if err := pdasvc.EnsureDBDomain(s.ctx, s.js); err != nil {
		return err
	}
	sh, err := pdasvc.NewShard(s.ctx, cfg, s.job, s.js, pdasvc.NewRedisShardStore(redis.NewClient(&redis.Options{Addr: *redisAddr})), s.log, s.m)
	if err != nil {
		return err
	}
	return s.run("db-shard", sh.Run)
}

func runKeygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	role := fs.String("role", env("role", "proxy"), "proxy|db")
	group := fs.String("group", env("group", "ristretto255"), "ristretto255|p256")
	out := fs.String("out", env("out", ""), "key file to write (mode 0600)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	id, err := groupID(*group)
	if err != nil {
		return err
	}
	g, _ := pda.NewGroup(id)
	if *out == "" {
		return errors.New("-out is required")
	}
	var b, pub []byte
	switch *role {
	case "proxy":
		s, err := pdasvc.GenerateProxySecrets(g)
		if err != nil {
			return err
		}
		b, err = pdasvc.MarshalProxySecrets(g, s)
		if err != nil {
			return err
		}
		pub = s.Keys.Oracle.PublicKey()
	case "db":
		s, err := pdasvc.GenerateDBSecrets(g)
		if err != nil {
			return err
		}
		b, err = pdasvc.MarshalDBSecrets(g, s)
		if err != nil {
			return err
		}
		pub = s.Key.PublicKey()
	default:
		return errors.New("-role must be proxy or db")
	}
	if err := os.WriteFile(*out, b, 0o600); err != nil {
		return err
	}
	fmt.Println(hex.EncodeToString(pub))
	return nil
}
