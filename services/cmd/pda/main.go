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
// Every flag has an environment fallback OBSCURA_<FLAG> (dashes become underscores); the
// roles share the common flags, port scheme and shutdown of package daemon (NATS password from
// --nats-password-file, /metrics on --metrics-addr, /healthz and /readyz on --health-addr).
// A configuration error (a bad flag, a malformed environment value, an invalid setting,
// an unreadable key or certificate) exits with status 2.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/keys"
	"github.com/obscura-iot/obscura/services/pkg/pda"
	pdaroles "github.com/obscura-iot/obscura/services/pkg/pda/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func main() {
	daemon.Main("pda", []daemon.Command{
		{Name: "proxy", Run: runProxy}, {Name: "mixer", Run: runMixer}, {Name: "oracle", Run: runOracle},
		{Name: "db-frontend", Run: runFrontend}, {Name: "db-shard", Run: runShard}, {Name: "submit", Run: runSubmit},
		{Name: "keygen", Run: runKeygen}, {Name: "demo", Run: runDemo}, {Name: "probe", Run: daemon.RunProbe},
	})
}

// errConfig marks a configuration error: the process exits with status 2.
var errConfig = daemon.ErrConfig

// configErr marks err (if any) as a configuration error.
func configErr(err error) error { return daemon.ConfigError(err) }

// newFlags returns the flag set of a subcommand: every flag --x-y falls back to OBSCURA_X_Y.
func newFlags(cmd string) *envflag.Set { return daemon.NewFlags(cmd) }

// parseFlags parses the command line of a subcommand that takes no positional arguments.
func parseFlags(f *envflag.Set, args []string) error { return daemon.ParseFlags(f, args) }

// common holds the flags every service role shares: the daemon's and the job's.
type common struct {
	daemon.Common
	job jobFlags
}

type jobFlags struct {
	deployment, group, countMode, values, dbPub, proxyPub string
	tau, chunks                                           int
	window, grace                                         time.Duration
}

func (c *common) register(f *envflag.Set) {
	c.Common.Bind(f)
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
	return 0, fmt.Errorf("--group must be ristretto255 or p256, not %q", s)
}

func (j *jobFlags) build() (*pdaroles.Job, error) {
	var bad []error
	if j.tau < 1 || j.tau > math.MaxUint32 {
		bad = append(bad, fmt.Errorf("--threshold must be in [1, %d], not %d", uint32(math.MaxUint32), j.tau))
	}
	if j.chunks < 1 || j.chunks > pda.MaxChunks {
		bad = append(bad, fmt.Errorf("--chunks must be in [1, %d], not %d", pda.MaxChunks, j.chunks))
	}
	if len(bad) > 0 {
		return nil, errors.Join(bad...)
	}
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
		return nil, fmt.Errorf("--count-mode must be distinct_participants or tuples, not %q", j.countMode)
	}
	if j.values != "" {
		for _, v := range strings.Split(j.values, ",") {
			x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
			if err != nil {
				return nil, fmt.Errorf("--values: %w", err)
			}
			job.Values = append(job.Values, uint16(x))
		}
	}
	if job.DBKey, err = hex.DecodeString(j.dbPub); err != nil {
		return nil, fmt.Errorf("--db-public-key: %w", err)
	}
	if job.ProxyKey, err = hex.DecodeString(j.proxyPub); err != nil {
		return nil, fmt.Errorf("--proxy-public-key: %w", err)
	}
	return job, job.Validate()
}

// service is what every long-running role gets after start-up: the daemon runtime, the job
// and the PDA metrics.
type service struct {
	*daemon.Runtime
	job *pdaroles.Job
	m   *pdaroles.Metrics
}

// start validates the common flags and the job, reads the NATS password and prepares the
// role's runtime.
func start(role string, c *common) (*service, error) {
	if err := daemon.JoinConfig(c.Validate()); err != nil {
		return nil, err
	}
	job, err := c.job.build()
	if err != nil {
		return nil, configErr(err)
	}
	if err := daemon.JoinConfig(c.LoadSecrets()); err != nil {
		return nil, err
	}
	rt := daemon.New(role, &c.Common)
	return &service{Runtime: rt, job: job, m: pdaroles.NewMetrics(rt.Registry)}, nil
}

// run sets the role up on the runtime (retried until NATS and the stores are there) and runs
// it until SIGTERM/SIGINT.
func (s *service) run(name string, setup func(ctx context.Context) (func(ctx context.Context) error, error), checks ...daemon.Check) error {
	return s.Run(daemon.RoleFunc(func(ctx context.Context, _ *daemon.Runtime) (func(context.Context) error, []daemon.Check, error) {
		f, err := setup(ctx)
		return f, checks, err
	}))
}

// ensureProxyDomain creates the proxy domain's streams and buckets, kept for two windows and
// the grace. A live pool kept for another time means the roles of the job disagree on its window:
// a configuration error (exit 2), never a silent change of the stream.
func (s *service) ensureProxyDomain(ctx context.Context) error {
	err := pdaroles.EnsureProxyDomain(ctx, s.JS, s.job.PoolRetention())
	if errors.Is(err, pdaroles.ErrRetentionChange) {
		return configErr(err)
	}
	return err
}

// redisPing is ready when the role's Redis answers.
func redisPing(rdb *redis.Client) daemon.Check {
	return func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
}

func runProxy(args []string) error {
	f := newFlags("proxy")
	var c common
	c.register(f)
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
		reuse     bool
	)
	f.String(&listen, "listen", ":8443", "HTTPS listen address")
	f.Bool(&reuse, "reuse-port", false, "set SO_REUSEPORT on the HTTPS listener, so several proxies (hostNetwork replicas) share one address")
	bindKeys(f, &ks, "/var/run/secrets/pda/proxy.json", "proxy key bundle (pda keygen --role proxy)")
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	s.AddDependency("redis", redisPing(rdb))
	return s.run("ingress", func(ctx context.Context) (func(context.Context) error, error) {
		if err := s.ensureProxyDomain(ctx); err != nil {
			return nil, err
		}
		g, err := pdaroles.NewIngress(ctx, cfg, s.job, sec, s.JS, pdaroles.NewRedisProxyStore(rdb), s.Log, s.m)
		if err != nil {
			return nil, err
		}
		ln, err := telemetry.Listen(ctx, cfg.Listen, reuse)
		if err != nil {
			return nil, fmt.Errorf("listen for HTTPS on %s: %w", cfg.Listen, err)
		}
		if err := s.Addrs.Record(ln.Addr().String(), telemetry.AddrHTTPS); err != nil {
			ln.Close()
			return nil, err
		}
		s.Log.Info("participant API listening", "addr", ln.Addr().String())
		return func(ctx context.Context) error {
			return g.Serve(ctx, ln, &tls.Config{Certificates: []tls.Certificate{tc}, ClientCAs: pool})
		}, nil
	})
}

func runMixer(args []string) error {
	f := newFlags("mixer")
	var c common
	c.register(f)
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
	return s.run("mixer", func(ctx context.Context) (func(context.Context) error, error) {
		if err := s.ensureProxyDomain(ctx); err != nil {
			return nil, err
		}
		x, err := pdaroles.NewMixer(ctx, cfg, s.job, sec, s.JS, s.Log, s.m)
		if err != nil {
			return nil, err
		}
		return x.Run, nil
	})
}

func runOracle(args []string) error {
	f := newFlags("oracle")
	var c common
	c.register(f)
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
	return s.run("oracle", func(ctx context.Context) (func(context.Context) error, error) {
		if err := s.ensureProxyDomain(ctx); err != nil {
			return nil, err
		}
		return pdaroles.NewOracle(s.job, sec, s.JS, s.Log, s.m).Run, nil
	})
}

func runFrontend(args []string) error {
	f := newFlags("db-frontend")
	var c common
	c.register(f)
	var (
		ks      keys.Source
		workers int
	)
	bindKeys(f, &ks, "/var/run/secrets/pda/db.json", "DB key bundle (pda keygen --role db)")
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
	return s.run("db-frontend", func(ctx context.Context) (func(context.Context) error, error) {
		if err := pdaroles.EnsureDBDomain(ctx, s.JS); err != nil {
			return nil, err
		}
		fe, err := pdaroles.NewFrontend(ctx, pdaroles.FrontendConfig{Workers: workers}, s.job, sec, s.JS, s.Log, s.m)
		if err != nil {
			return nil, err
		}
		return fe.Run, nil
	})
}

func runShard(args []string) error {
	f := newFlags("db-shard")
	var c common
	c.register(f)
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
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	s.AddDependency("redis", redisPing(rdb))
	return s.run("db-shard", func(ctx context.Context) (func(context.Context) error, error) {
		if err := pdaroles.EnsureDBDomain(ctx, s.JS); err != nil {
			return nil, err
		}
		sh, err := pdaroles.NewShard(ctx, cfg, s.job, s.JS, pdaroles.NewRedisShardStore(rdb), s.Log, s.m)
		if err != nil {
			return nil, err
		}
		return sh.Run, nil
	})
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
		return configErr(errors.New("--out is required"))
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
		return configErr(errors.New("--role must be proxy or db"))
	}
	if err := os.WriteFile(out, b, 0o600); err != nil {
		return err
	}
	fmt.Println(hex.EncodeToString(pub))
	return nil
}
