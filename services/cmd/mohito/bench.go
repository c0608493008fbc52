package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// runBench is `mohito bench`: the open-loop capacity benchmark (loadgen.Bench). Every server
// role runs as its own process of this binary, with nats-server and redis-server from
// --bin-dir; users run in this process and devices in a `mohito bench-devices` process,
// and neither's CPU is counted.
func runBench(args []string) error {
	f := daemon.NewFlags("bench")
	var (
		o               loadgen.BenchOptions
		rates, pin, src string
	)
	f.String(&o.BinDir, "bin-dir", envOr("OBSCURA_BIN", "bin"), "directory holding nats-server and redis-server")
	f.Int(&o.Vendors, "vendors", 3, "vendors (one shuffler and one vendor agent process each)")
	f.Duration(&o.Round, "round", time.Second, "round period T")
	f.Int(&o.CommandSize, "command-size", 1024, "padded command size L_c (bytes)")
	f.Int(&o.PayloadSize, "payload", 32, "command payload bytes")
	f.String(&rates, "rates", "100*2..3200", "offered commands/s per step: a list (100,200,400) or start*factor..last")
	f.Duration(&o.Warmup, "warmup", 5*time.Second, "open-loop load before the measured window of each step")
	f.Duration(&o.Measure, "measure", 10*time.Second, "the measured window of each step")
	f.Duration(&o.Drain, "drain", 10*time.Second, "after the window, time for commands in flight to be answered")
	f.Int(&o.DecryptWorkers, "decrypt-workers", 1, "decrypt worker processes")
	f.Int(&o.Encoders, "encoders", 1, "encoder processes (OKVS partitions)")
	f.Float64(&o.UsersPerRate, "users-per-rate", 4, "users (one device each) per offered command/s; must cover the latency, since a user has one command in flight")
	f.Duration(&o.DeviceSpacing, "device-spacing", 0, "how long apart one device's commands are issued (devices = rate × this; default 2 rounds)")
	f.String(&pin, "pin", "", "taskset CPU lists per process, e.g. decrypt-worker-0=0,decrypt-worker-1=1")
	f.String(&o.CPUProfileDir, "cpuprofile-dir", "", "write each role's CPU profile of the measured window here (<process>.pprof; users.pprof: this process's users)")
	f.String(&src, "fullround-src", "", "the services module directory: run the library's FullRound benchmark there for the crypto-bound ratio (empty: skipped)")
	f.Bool(&o.KeepGoing, "keep-going", false, "run every step even after one fails")
	f.String(&o.JSONPath, "json", "", "write the result as JSON here")
	if err := daemon.ParseFlags(f, args); err != nil {
		return err
	}
	var bad []string
	var err error
	if o.Rates, err = loadgen.ParseRates(rates); err != nil {
		bad = append(bad, "--rates: "+err.Error())
	}
	if o.Vendors < 1 || o.Vendors > 64 {
		bad = append(bad, "--vendors must be in [1, 64]")
	}
	if o.Round < 100*time.Millisecond || o.Measure < o.Round || o.Warmup < 0 {
		bad = append(bad, "--round ≥ 100ms, --measure ≥ --round and --warmup ≥ 0 are required")
	}
	if o.CommandSize < 128 || o.CommandSize > 4000 || o.PayloadSize > o.CommandSize-90 {
		bad = append(bad, "--command-size must be in [128, 4000] and --payload ≤ --command-size − 90")
	}
	if pin != "" {
		o.Pin = map[string]string{}
		for _, kv := range strings.Split(pin, ";") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				bad = append(bad, "--pin wants process=cpus;process=cpus")
				break
			}
			o.Pin[k] = v
		}
	}
	for _, tool := range []string{"nats-server", "redis-server"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, tool)); err != nil {
			bad = append(bad, fmt.Sprintf("--bin-dir %s has no %s", o.BinDir, tool))
		}
	}
	if o.CPUProfileDir != "" {
		if err := os.MkdirAll(o.CPUProfileDir, 0o755); err != nil {
			bad = append(bad, "--cpuprofile-dir: "+err.Error())
		}
		if abs, err := filepath.Abs(o.CPUProfileDir); err == nil {
			o.CPUProfileDir = abs
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(bad, "; "))
	}
	if o.FullRoundDir, err = filepath.Abs(src); src == "" || err != nil {
		o.FullRoundDir = ""
	}
	if o.Binary, err = os.Executable(); err != nil {
		return err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	o.Out = os.Stdout
	fmt.Fprintf(o.Out, "mohito bench: %d vendors, round %v, L_c %d B, %d decrypt workers, %d encoders, steps %v commands/s\n",
		o.Vendors, o.Round, o.CommandSize, o.DecryptWorkers, o.Encoders, o.Rates)
	_, err = loadgen.Bench(ctx, o)
	return err
}

// runBenchDevices is `mohito bench-devices <spec.json>`, the bench's devices process
// (loadgen.RunBenchDevices); only mohito bench starts it.
func runBenchDevices(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: bench-devices wants one spec file", errConfig)
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	return loadgen.RunBenchDevices(ctx, args[0], os.Stdin, os.Stdout)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
