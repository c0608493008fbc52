// Command mohito runs the Mohito metadata-hiding round system: one long-running daemon per
// role, as the operator deploys them (docs/services.md has the full contract),
//
//	mohito gateway | coordinator | decrypt-worker | encoder | responder    (integrator)
//	mohito shuffler | vendor-agent                                         (vendor)
//
// and the tools around a deployment: loadgen (the whole deployment in one process under a
// configurable load; per-round table, JSON and CSV results; -nats-url/-redis-addr to use
// external servers), probe (Kubernetes exec probe), provision (keys, registries and tokens
// for a cluster), drive (load from outside, through the TLS edge and MQTT) and smoke (helm
// test). The embedded demo of every system is `obscura demo`.
//
// Every flag --x-y falls back to OBSCURA_X_Y (package daemon). A configuration error, a
// malformed environment value included, exits with status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "loadgen":
		err = runLoadgen(os.Args[2:])
	case "probe":
		err = daemon.RunProbe(os.Args[2:])
	case "provision":
		err = runProvision(os.Args[2:], os.Stdout)
	case "drive":
		err = runDrive(os.Args[2:], os.Stdout)
	case "bench":
		err = runBench(os.Args[2:])
	case "bench-devices":
		err = runBenchDevices(os.Args[2:])
	case "smoke":
		err = runSmoke(os.Args[2:], os.Stdout)
	case "gateway", "coordinator", "decrypt-worker", "encoder", "responder", "shuffler", "vendor-agent":
		var cfg roleConfig
		if cfg, err = parseRole(os.Args[1], os.Args[2:]); err == nil {
			tuneRoleGC()
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
	fmt.Fprintln(os.Stderr, "usage: mohito loadgen|bench|gateway|coordinator|decrypt-worker|encoder|responder|shuffler|vendor-agent|probe|provision|drive|smoke [flags]   (mohito <cmd> -h for flags)")
}

// runLoadgen is `mohito loadgen`: the whole deployment in one process (or against external
// NATS and Redis) under a configurable load, with a per-round table and JSON/CSV results.
func runLoadgen(args []string) error {
	f := daemon.NewFlags("loadgen")
	var (
		o         loadgen.Options
		natsPW    string
		redisAddr string
	)
	o.Bind(f, loadgen.LoadgenDefaults)
	f.String(&natsPW, "nats-password-suffix", "", "password = user + suffix (external NATS)")
	f.String(&redisAddr, "redis-addr", "", "integrator Redis (empty: in-memory)")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	if bad := o.Validate(); len(bad) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(bad, "; "))
	}
	if o.NATSURL != "" {
		o.Password = func(u string) string { return u + natsPW }
	}
	if redisAddr != "" {
		o.Store = roundstate.NewRedis(redis.NewClient(&redis.Options{Addr: redisAddr}), 10*time.Minute)
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	o.Out = os.Stdout
	_, err := loadgen.Run(ctx, o)
	return err
}
