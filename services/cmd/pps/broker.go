package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// brokerConfig is `pps broker`'s configuration (trust domain B): the common NATS flags of the
// broker's user, its own Redis, the garbler link (a gRPC client with mutual TLS trusting only
// the garbler domain's CA) and the pipelines file the operator renders.
type brokerConfig struct {
	daemon.Common
	redisAddr, redisPasswordFile        string
	garblerAddr, garblerServerName      string
	tlsCert, tlsKey, garblerCA          string
	pipelinesFile                       string
	pipelinesReload                     time.Duration
	workers, chunkBytes, streamReplicas int
	leaseTTL                            time.Duration
	check                               string
	windowCheck                         bool
	pregarble                           bool
}

func (c *brokerConfig) bind(f *envflag.Set) {
	c.Common.Bind(f)
	f.String(&c.redisAddr, "redis-addr", "127.0.0.1:6379", "the broker's own Redis")
	f.String(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (none: no AUTH)")
	f.String(&c.garblerAddr, "garbler-addr", "127.0.0.1:7443", "the garbler's gRPC address (host:port)")
	f.String(&c.garblerServerName, "garbler-server-name", "", "name checked in the garbler's certificate (default: the host of --garbler-addr)")
	f.String(&c.tlsCert, "tls-cert", "/var/run/secrets/pps/tls.crt", "the broker's client certificate for the garbler link (PEM)")
	f.String(&c.tlsKey, "tls-key", "/var/run/secrets/pps/tls.key", "its private key (PEM)")
	f.String(&c.garblerCA, "garbler-ca", "/var/run/secrets/pps/garbler-ca.crt", "the garbler domain's CA: the only issuer trusted for the garbler's certificate")
	f.String(&c.pipelinesFile, "pipelines-file", "/etc/pps/pipelines.json", "the pipelines file (contract.PipelinesFile)")
	f.Duration(&c.pipelinesReload, "pipelines-reload", 10*time.Second, "how often the pipelines file is re-read for changes (0: never)")
	f.Int(&c.workers, "workers", 2, "concurrent executions (evaluator workers)")
	f.Int(&c.chunkBytes, "chunk-bytes", roles.DefaultChunkBytes, "garbled stream chunk asked of the garbler, and the evaluator's read window (bytes)")
	f.Int(&c.streamReplicas, "stream-replicas", 1, "replicas of the PPS_PUB, PPS_DEV and PPS_OUT streams (3 in production)")
	f.Duration(&c.leaseTTL, "lease-ttl", 10*time.Second, "TTL of the scheduler lease: how long a crashed leader's ticks wait for a standby")
	f.String(&c.check, "check", contract.CheckKKRT, "consistency check of faithful pipelines that name none: kkrt (KKRT batched OPRF, D16b) or oprf (OPRF-PSI, D16a)")
	f.Bool(&c.windowCheck, "window-check", true, "check each publish's labels (KKRT) as it arrives during the collection window, so the tick checks only the rest")
	f.Bool(&c.pregarble, "pregarble", true, "garble each faithful function's next execution's AND gates ahead of its inputs, during the window (the broker holds their tables, 32 B per AND gate), so the tick streams only the inputs-dependent part")
}

// validate checks the settings without reading anything.
func (c *brokerConfig) validate() error {
	errs := c.Common.Validate()
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.NATSUser == "" && c.NATSCreds == "" {
		bad("--nats-user (with --nats-password-file) or --nats-creds is required: the broker connects as %s", contract.BrokerUser)
	}
	if c.redisAddr == "" {
		bad("--redis-addr is required")
	}
	if _, _, err := net.SplitHostPort(c.garblerAddr); err != nil {
		bad("--garbler-addr %q: %v", c.garblerAddr, err)
	}
	if c.tlsCert == "" || c.tlsKey == "" || c.garblerCA == "" {
		bad("--tls-cert, --tls-key and --garbler-ca are required: the garbler link is mutual TLS only")
	}
	if c.pipelinesFile == "" {
		bad("--pipelines-file is required")
	}
	if c.pipelinesReload < 0 {
		bad("--pipelines-reload %s is negative", c.pipelinesReload)
	}
	if c.workers < 1 || c.workers > 256 {
		bad("--workers %d: want 1 to 256", c.workers)
	}
	if c.chunkBytes < roles.MinChunkBytes || c.chunkBytes > roles.MaxChunkBytes {
		bad("--chunk-bytes %d: want %d to %d", c.chunkBytes, roles.MinChunkBytes, roles.MaxChunkBytes)
	}
	if c.streamReplicas < 1 || c.streamReplicas > 5 {
		bad("--stream-replicas %d: want 1 to 5", c.streamReplicas)
	}
	if c.leaseTTL < time.Second {
		bad("--lease-ttl %s: want at least 1s", c.leaseTTL)
	}
	if c.check != contract.CheckKKRT && c.check != contract.CheckOPRF {
		bad("--check %q: want %s or %s", c.check, contract.CheckKKRT, contract.CheckOPRF)
	}
	return daemon.JoinConfig(errs)
}

// brokerSecrets are what the broker reads from files at start.
type brokerSecrets struct {
	tls           *tls.Config
	redisPassword string
	pipelines     []contract.Pipeline
	pipelinesRaw  []byte
}

// load reads the certificates, the Redis password and the pipelines file; every error is a
// configuration error (exit 2).
func (c *brokerConfig) load() (*brokerSecrets, error) {
	var errs []error
	s := &brokerSecrets{}
	var err error
	if s.tls, err = roles.ClientTLS(c.tlsCert, c.tlsKey, c.garblerCA, c.garblerServerName); err != nil {
		errs = append(errs, err)
	}
	if c.redisPasswordFile != "" {
		b, err := os.ReadFile(c.redisPasswordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--redis-password-file: %w", err))
		}
		s.redisPassword = strings.TrimRight(string(b), "\r\n")
		clear(b)
	}
	if s.pipelines, s.pipelinesRaw, err = brokerReadPipelines(c.pipelinesFile); err != nil {
		errs = append(errs, fmt.Errorf("--pipelines-file: %w", err))
	}
	errs = append(errs, c.LoadSecrets()...)
	return s, daemon.JoinConfig(errs)
}

// brokerReadPipelines reads and validates the pipelines file as the broker runs it: the
// contract's checks, then every function compiled, faithful, and bound to its publishers.
func brokerReadPipelines(path string) ([]contract.Pipeline, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := contract.ReadPipelines(path)
	if err != nil {
		return nil, nil, err
	}
	if err := roles.ValidateBrokerPipelines(f.Pipelines); err != nil {
		return nil, nil, err
	}
	return f.Pipelines, raw, nil
}

func runBroker(args []string) error {
	f := daemon.NewFlags("broker")
	var c brokerConfig
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
	rt := daemon.New("pps-broker", &c.Common)
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, Password: sec.redisPassword})
	defer rdb.Close()
	rt.AddDependency("redis", func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	})
	// Garble's data messages are at most a chunk (the margin covers the header and framing);
	// a consistency-check reply grows with the function's input bits (OPRF-PSI: 5.3 MB for
	// 9 × 288 values; KKRT: 1.3 MB), so the limit is the largest reply pps can encode, and
	// requests may be as large as the garbler accepts (a KKRT request is 68 B per position).
	cc, err := grpc.NewClient(c.garblerAddr, grpc.WithTransportCredentials(credentials.NewTLS(sec.tls)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max(c.chunkBytes+gc.MaxContext+(1<<20), pps.MaxPSIResponseSize+(1<<10), pps.MaxKKRTResponseSize+(1<<10))),
			grpc.MaxCallSendMsgSize(roles.GarblerMaxRecvMsgSize())),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}))
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("--garbler-addr: %w", err))
	}
	defer cc.Close()

	var (
		once sync.Once
		b    *roles.Broker
	)
	return rt.Run(daemon.RoleFunc(func(ctx context.Context, rt *daemon.Runtime) (func(context.Context) error, []daemon.Check, error) {
		var err error
		once.Do(func() {
			b, err = roles.NewBroker(roles.BrokerOptions{NC: rt.NC, JS: rt.JS, Redis: rdb, Garbler: ppsv1.NewGarblerClient(cc),
				Pipelines: sec.pipelines, Workers: c.workers, ChunkBytes: c.chunkBytes, StreamReplicas: c.streamReplicas,
				LeaseTTL: c.leaseTTL, Check: c.check, WindowCheck: c.windowCheck, Pregarble: c.pregarble, Logger: rt.Log, Registerer: rt.Registry})
		})
		if b == nil {
			return nil, nil, daemon.ConfigError(err)
		}
		if err := b.EnsureStreams(ctx); err != nil {
			return nil, nil, err
		}
		var checks []daemon.Check
		for _, ck := range b.Checks() {
			checks = append(checks, daemon.Check(ck))
		}
		rt.Log.Info("broker ready to run", "pipelines", len(sec.pipelines), "workers", c.workers, "garbler", c.garblerAddr)
		return func(ctx context.Context) error {
			g, _ := telemetry.NewGroup(ctx)
			g.Go("broker", b.Run)
			if c.pipelinesReload > 0 {
				g.Go("pipelines-file", func(ctx context.Context) error {
					brokerWatchPipelines(ctx, rt, b, c.pipelinesFile, sec.pipelinesRaw, c.pipelinesReload)
					return nil
				})
			}
			return g.Wait()
		}, checks, nil
	}))
}

// brokerWatchPipelines re-reads the pipelines file (a ConfigMap the operator updates) and
// installs a changed one; an invalid file is logged and the running set kept.
func brokerWatchPipelines(ctx context.Context, rt *daemon.Runtime, b *roles.Broker, path string, last []byte, every time.Duration) {
	for clock.Sleep(ctx, every) {
		raw, err := os.ReadFile(path)
		if err != nil || bytes.Equal(raw, last) {
			continue
		}
		ps, _, err := brokerReadPipelines(path)
		if err == nil {
			err = b.SetPipelines(ps)
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				rt.Log.Error("pipelines file changed but is invalid; keeping the running pipelines", "err", err)
			}
			last = raw
			continue
		}
		last = raw
		rt.Log.Info("pipelines file changed; installed", "pipelines", len(ps))
	}
}
