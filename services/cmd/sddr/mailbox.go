package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/sddr/client"
	"github.com/obscura-iot/obscura/services/pkg/sddr/roles"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func init() {
	register("mailbox", runMailbox, "the encounter mailbox API (sealed messages under opaque addresses, in its own Redis)")
}

// mailboxConfig is `sddr mailbox`'s configuration.
type mailboxConfig struct {
	listenAddr, metricsAddr, healthAddr, logLevel string
	addrFile                                      string
	reusePort                                     bool
	redisAddr, redisPasswordFile                  string
	ttl                                           time.Duration
	maxMessages, burst, maxClients, maxSealed     int
	rate                                          float64
}

func (c *mailboxConfig) validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	for _, a := range []struct{ name, v string }{{"--listen-addr", c.listenAddr}, {"--metrics-addr", c.metricsAddr},
		{"--health-addr", c.healthAddr}, {"--redis-addr", c.redisAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			bad("%s %q: %v", a.name, a.v, err)
		}
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q must be debug, info, warn or error", c.logLevel)
	}
	o := roles.MailboxOptions{Redis: redis.NewClient(&redis.Options{}), TTL: c.ttl, MaxMessages: c.maxMessages,
		Rate: c.rate, Burst: c.burst, MaxClients: c.maxClients, MaxSealed: c.maxSealed}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	return daemon.JoinConfig(errs)
}

func runMailbox(args []string) error {
	var c mailboxConfig
	f := daemon.NewFlags("mailbox")
	f.String(&c.listenAddr, "listen-addr", ":8080", "mailbox API listen address (HTTP/1.1 and cleartext HTTP/2, behind the edge)")
	f.String(&c.metricsAddr, "metrics-addr", daemon.DefaultMetricsAddr, "Prometheus /metrics listen address")
	f.String(&c.healthAddr, "health-addr", daemon.DefaultHealthAddr, "/healthz and /readyz listen address")
	f.String(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	f.String(&c.addrFile, "addr-file", "", "write the bound health= and metrics= addresses here (port 0, hostNetwork); sddr probe reads it")
	f.Bool(&c.reusePort, "reuse-port", false, "listen on --listen-addr with SO_REUSEPORT (replicas sharing a host network)")
	f.String(&c.redisAddr, "redis-addr", "127.0.0.1:6379", "the mailbox's own Redis")
	f.String(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (none: no AUTH)")
	f.Duration(&c.ttl, "ttl", 24*time.Hour, "how long a message is kept")
	f.Int(&c.maxMessages, "max-messages", 64, "unexpired messages one mailbox holds at most")
	f.Float64(&c.rate, "rate", 5, "requests per second per client (bearer token)")
	f.Int(&c.burst, "burst", 20, "burst per client")
	f.Int(&c.maxClients, "max-clients", 100000, "client buckets kept (least recently used evicted)")
	f.Int(&c.maxSealed, "max-message-bytes", client.MaxSealed, "largest sealed message accepted, in bytes (a larger put is refused as too_large)")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	password := ""
	if c.redisPasswordFile != "" {
		b, err := os.ReadFile(c.redisPasswordFile)
		if err != nil {
			return daemon.ConfigError(fmt.Errorf("--redis-password-file: %w", err))
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	log := telemetry.NewLogger(os.Stderr, "sddr-mailbox", c.logLevel)
	reg := telemetry.NewRegistry()
	health := &telemetry.Health{}
	if err := health.Register(reg); err != nil {
		return err
	}
	af, err := telemetry.NewAddrFile(c.addrFile)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, Password: password})
	defer rdb.Close()
	mb, err := roles.NewMailbox(roles.MailboxOptions{Redis: rdb, TTL: c.ttl, MaxMessages: c.maxMessages, Rate: c.rate,
		Burst: c.burst, MaxClients: c.maxClients, MaxSealed: c.maxSealed, Logger: log, Registerer: reg})
	if err != nil {
		return daemon.ConfigError(err)
	}
	ctx, stop := telemetry.SignalContext(context.Background())
	defer stop()
	l, err := telemetry.Listen(ctx, c.listenAddr, c.reusePort)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listenAddr, err)
	}
	g, gctx := telemetry.NewGroup(ctx)
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
	g.Go("mailbox", func(ctx context.Context) error { return mb.Serve(ctx, l) })
	check := health.Dependency("redis", mb.Ping)
	g.Go("readiness", func(ctx context.Context) error {
		for {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := check(cctx)
			cancel()
			if ctx.Err() != nil {
				health.SetReady(false, "shutting down")
				return nil
			}
			why := ""
			if err != nil {
				why = "redis: " + err.Error()
			}
			health.SetReady(why == "", why)
			select {
			case <-ctx.Done():
				health.SetReady(false, "shutting down")
				return nil
			case <-time.After(2 * time.Second):
			}
		}
	})
	_ = gctx
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return err
	}
	log.Info("stopped")
	return nil
}
