// Command mohito runs the Mohito metadata-hiding round system.
//
//	mohito demo      one process: embedded NATS JetStream (one account per trust
//	                 domain), every integrator and vendor role in-process,
//	                 simulated users and devices; shows rounds live and exits
//	                 with a summary after -rounds rounds
//	mohito loadgen   the same deployment under a configurable load; per-round
//	                 table, JSON and CSV results; -nats-url/-redis-addr to use
//	                 external servers
//
// and one long-running daemon per role, as the operator deploys them
// (docs/services.md has the full contract):
//
//	mohito gateway | coordinator | decrypt-worker | encoder | responder    (integrator)
//	mohito shuffler | vendor-agent                                         (vendor)
//
// Demo and loadgen flags fall back to MOHITO_<FLAG>; the daemons' flags fall
// back to OBSCURA_* variables. A configuration error exits with status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = run(os.Args[2:], true)
	case "loadgen":
		err = run(os.Args[2:], false)
	case "gateway", "coordinator", "decrypt-worker", "encoder", "responder", "shuffler", "vendor-agent":
		var cfg any
		if cfg, err = parseRole(os.Args[1], os.Args[2:]); err == nil {
			err = runRole(os.Args[1], cfg)
		}
	default:
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mohito %s: %v\n", os.Args[1], err)
		if errors.Is(err, errConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mohito demo|loadgen|gateway|coordinator|decrypt-worker|encoder|responder|shuffler|vendor-agent [flags]   (mohito <cmd> -h for flags)")
}

// env returns MOHITO_<NAME> or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv("MOHITO_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); ok {
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

// Config is the demo/loadgen configuration.
type Config struct {
	loadgen.Options
	RedisAddr string
	Metrics   string
}

func run(args []string, demo bool) error {
	name := "loadgen"
	defRounds, defUsers, defDevices, defVendors := 200, 200, 600, 5
	if demo {
		name = "demo"
		defRounds, defUsers, defDevices, defVendors = 20, 24, 60, 3
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c Config
	fs.IntVar(&c.Vendors, "vendors", envInt("vendors", defVendors), "number of vendors")
	fs.IntVar(&c.Devices, "devices", envInt("devices", defDevices), "total devices")
	skew, _ := strconv.ParseFloat(env("skew", "1.0"), 64)
	fs.Float64Var(&c.Skew, "skew", skew, "power-law skew of device counts over vendors (0 = uniform)")
	fs.IntVar(&c.Users, "users", envInt("users", defUsers), "number of users")
	fs.IntVar(&c.Rounds, "rounds", envInt("rounds", defRounds), "rounds to run before the summary")
	fs.DurationVar(&c.Round, "round", envDur("round", 500*time.Millisecond), "round period T")
	fs.IntVar(&c.CommandSize, "command-size", envInt("command-size", 1024), "padded command size L_c (bytes)")
	fs.IntVar(&c.PayloadSize, "payload", envInt("payload", 64), "command payload bytes")
	fs.DurationVar(&c.Think, "think", envDur("think", 0), "pause between a user's commands (sets the rate)")
	fs.IntVar(&c.DecryptWorkers, "decrypt-workers", envInt("decrypt-workers", 2), "decrypt workers")
	fs.IntVar(&c.Encoders, "encoders", envInt("encoders", 2), "OKVS encoder partitions")
	fs.IntVar(&c.Gateways, "gateways", envInt("gateways", 2), "gateway replicas")
	fs.IntVar(&c.Capacity, "headroom", envInt("headroom", 2), "C_v headroom over the expected per-round load")
	fs.StringVar(&c.NATSURL, "nats-url", env("nats-url", ""), "external NATS with the Obscura accounts (empty: embedded)")
	natsPW := fs.String("nats-password-suffix", env("nats-password-suffix", ""), "password = user + suffix (external NATS)")
	fs.StringVar(&c.RedisAddr, "redis-addr", env("redis-addr", ""), "integrator Redis (empty: in-memory, demo only)")
	fs.StringVar(&c.JSONPath, "json", env("json", ""), "write the summary as JSON here")
	fs.StringVar(&c.CSVPath, "csv", env("csv", ""), "write the per-round table as CSV here")
	fs.BoolVar(&c.Baseline, "jetstream-baseline", env("jetstream-baseline", "") == "true", "after the run, measure raw JetStream publish+consume at -command-size on the same server")
	fs.StringVar(&c.Metrics, "metrics-addr", env("metrics-addr", ""), "serve /metrics /healthz /readyz here (e.g. 127.0.0.1:9090)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := validate(&c); err != nil {
		return err
	}
	if c.NATSURL != "" {
		sfx := *natsPW
		c.Password = func(u string) string { return u + sfx }
	}
	if c.RedisAddr != "" {
		c.Store = roundstate.NewRedis(redis.NewClient(&redis.Options{Addr: c.RedisAddr}), 10*time.Minute)
	}
	c.Out = os.Stdout
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	_, err := loadgen.Run(ctx, c.Options)
	return err
}

func validate(c *Config) error {
	var bad []string
	if c.Vendors < 1 || c.Vendors > 64 {
		bad = append(bad, "-vendors must be in [1, 64]")
	}
	if c.Devices < c.Vendors {
		bad = append(bad, "-devices must be ≥ -vendors")
	}
	if c.Users < 1 || c.Rounds < 1 || c.Round < 50*time.Millisecond {
		bad = append(bad, "-users ≥ 1, -rounds ≥ 1 and -round ≥ 50ms are required")
	}
	if c.CommandSize < 128 || c.CommandSize > 4000 || c.PayloadSize > c.CommandSize-90 {
		bad = append(bad, "-command-size must be in [128, 4000] and -payload ≤ command-size − 90")
	}
	if len(bad) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(bad, "; "))
	}
	return nil
}
