package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/pkg/sddr/sim"
	"github.com/obscura-iot/obscura/services/pkg/sddr/sim/plots"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

func init() {
	register("simulate", runSimulate, "one shard of an encounter simulation (result: one JSON object, contract.Result)")
}

// terminationLog is where Kubernetes reads a container's termination message.
const terminationLog = "/dev/termination-log"

// simulateConfig is `sddr simulate`'s configuration. Flag names are a contract with the
// EncounterSimulation operator (docs/sddr.md, "Simulator").
type simulateConfig struct {
	devices          int
	hours            float64
	seed             uint64
	seedText         string
	interval         time.Duration
	epoch            time.Duration
	epochJitter      time.Duration
	revokeFraction   float64
	revokeAt         float64
	friends          int
	shards           int
	shardIndex       int
	shardIndexText   string
	scenario         string
	groupSize        int
	pDet             float64
	natsURL          string
	natsUser         string
	natsPasswordFile string
	runID            string
	resultFile       string
	plots            string
	metricsAddr      string
	logLevel         string
	readyTimeout     time.Duration
	// energy is Equation 1's coefficients (spec §5.5), one flag each (contract.EnergyFields).
	energy contract.Energy

	natsPassword string
}

func (c *simulateConfig) bind(f *envflag.Set) {
	f.Int(&c.devices, "devices", 1000, "devices in the whole simulation (all shards)")
	f.Float64(&c.hours, "hours", 24, "simulated hours (whole seconds)")
	f.String(&c.seedText, "seed", "1", "seed (uint64): the run is a function of it")
	f.Duration(&c.interval, "interval", 60*time.Second, "discovery interval (23 s … 15 min)")
	f.Duration(&c.epoch, "epoch", sddr.DefaultEpoch, "every device's epoch length: key and address rotate (1 min … 24 h, 1 … 255 discovery intervals, whole seconds)")
	f.Duration(&c.epochJitter, "epoch-jitter", sddr.DefaultEpochJitter, "uniform extra length of each epoch (0 … --epoch, whole seconds; 0: none)")
	f.Float64(&c.revokeFraction, "revoke-fraction", 0.1, "share of devices that revoke one friend (RevokeNow), [0, 1]; 0: nobody")
	f.Float64(&c.revokeAt, "revoke-at", 0.5, "when they revoke, as a fraction of the run (0, 1), plus up to one interval")
	f.Int(&c.friends, "friends", 5, "friends per device (0…256)")
	f.Int(&c.shards, "shards", 1, "shards of the run (one process each); > 1 needs --nats-url")
	f.String(&c.shardIndexText, "shard-index", "", "this shard's index (default: $JOB_COMPLETION_INDEX of an Indexed Job, else 0)", "OBSCURA_SHARD_INDEX", "JOB_COMPLETION_INDEX")
	f.String(&c.scenario, "scenario", sim.ScenarioCity, "city, crowd (255 new devices per inquiry) or groups (fixed groups of --group-size)")
	f.Int(&c.groupSize, "group-size", 5, "devices per group (scenario groups)")
	f.Float64(&c.pDet, "p-det", 0.95, "probability that a device in range answers an inquiry")
	f.String(&c.natsURL, "nats-url", "", "NATS server URL for a sharded run")
	f.String(&c.natsUser, "nats-user", "", "NATS user (with --nats-password-file)")
	f.String(&c.natsPasswordFile, "nats-password-file", "", "file holding the NATS user's password")
	f.String(&c.runID, "run-id", "local", "run id shared by the shards of one run (a NATS subject token: letters, digits, - and _)")
	f.String(&c.resultFile, "result-file", "", "where the result JSON goes (default: /dev/termination-log when it exists, else stdout; - is stdout)")
	f.String(&c.plots, "plots", "", "directory to write plots to (SVG), from sweeps of the groups scenario; empty: none")
	f.String(&c.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz here while simulating (empty: off)")
	f.String(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	f.Duration(&c.readyTimeout, "ready-timeout", 10*time.Minute, "how long a shard waits for the other shards to connect")
	for _, ef := range contract.EnergyFields {
		f.Float64(ef.Value(&c.energy), ef.Flag, *ef.Value(&contract.PaperEnergy),
			fmt.Sprintf("Equation 1: %s, %s (default: the paper's)", energyUsage[ef.Flag], ef.Bounds()))
	}
}

// energyUsage says what each energy coefficient charges.
var energyUsage = map[string]string{
	"idle-bt-joules-per-day": "idle with Bluetooth discoverable, per device-day",
	"epoch-change-mj":        "one epoch change (one per --epoch)",
	"discovery-mj":           "one inquiry with no device in range",
	"recognition-mj":         "processing one response (a device in range) of an inquiry",
	"answer-mj":              "answering one inquiry of another device",
	"battery-joules":         "a full battery (battery %/day = joules/day over this)",
}

// validate checks the settings without reading anything.
func (c *simulateConfig) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var err error
	if c.seed, err = strconv.ParseUint(c.seedText, 10, 64); err != nil {
		bad("--seed %q: not an unsigned 64-bit integer", c.seedText)
	}
	c.shardIndex = 0
	if c.shardIndexText != "" {
		if c.shardIndex, err = strconv.Atoi(c.shardIndexText); err != nil {
			bad("--shard-index (or JOB_COMPLETION_INDEX) %q: not an integer", c.shardIndexText)
		}
	}
	if math.IsNaN(c.hours) || c.hours <= 0 || c.hours > 24*366 {
		bad("--hours %v outside (0, 8784]", c.hours)
	}
	if c.shards > 1 && c.natsURL == "" {
		bad("--shards %d needs --nats-url: the shards exchange adverts over NATS", c.shards)
	}
	if (c.natsUser == "") != (c.natsPasswordFile == "") {
		bad("--nats-user and --nats-password-file go together")
	}
	if c.epoch <= 0 {
		bad("--epoch %v must be positive", c.epoch)
	}
	if c.epochJitter < 0 {
		bad("--epoch-jitter %v must not be negative", c.epochJitter)
	}
	if math.IsNaN(c.revokeFraction) || c.revokeFraction < 0 || c.revokeFraction > 1 {
		bad("--revoke-fraction %v outside [0, 1]", c.revokeFraction)
	}
	if math.IsNaN(c.revokeAt) || c.revokeAt <= 0 || c.revokeAt >= 1 {
		bad("--revoke-at %v outside (0, 1)", c.revokeAt)
	}
	if c.readyTimeout <= 0 {
		bad("--ready-timeout must be positive")
	}
	if c.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.metricsAddr); err != nil {
			bad("--metrics-addr %q: %v", c.metricsAddr, err)
		}
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q must be debug, info, warn or error", c.logLevel)
	}
	// Each coefficient as given: sim.Config would take a zero for the paper's default.
	energyOK := true
	for _, ef := range contract.EnergyFields {
		if v := *ef.Value(&c.energy); !ef.InRange(v) {
			bad("--%s %v outside %s", ef.Flag, v, ef.Bounds())
			energyOK = false
		}
	}
	cfg := c.sim()
	if !energyOK {
		cfg.Energy = contract.Energy{} // said above, once
	}
	if err := cfg.Validate(); err != nil {
		bad("%v", err)
	}
	if len(errs) == 0 && c.shards > 1 && !validRunID(c.runID) {
		bad("--run-id %q must be letters, digits, - and _", c.runID)
	}
	return daemon.JoinConfig(errs)
}

func validRunID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (c *simulateConfig) sim() sim.Config {
	cfg := sim.Config{
		RunID: c.runID, Scenario: c.scenario, Devices: c.devices,
		Duration: time.Duration(math.Round(c.hours*3600)) * time.Second,
		Seed:     c.seed, Interval: c.interval, Friends: c.friends, GroupSize: c.groupSize,
		Shards: c.shards, Shard: c.shardIndex, PDet: c.pDet, Energy: c.energy,
		Epoch: c.epoch, EpochJitter: c.epochJitter, RevokeFraction: c.revokeFraction, RevokeAt: c.revokeAt,
	}
	if c.epochJitter == 0 {
		cfg.EpochJitter = -1 // none (sim.Config takes zero for the default)
	}
	if c.revokeFraction == 0 {
		cfg.RevokeFraction = -1 // nobody
	}
	return cfg
}

// loadSecrets reads the NATS password file; errors name the file, never its contents.
func (c *simulateConfig) loadSecrets() error {
	if c.natsPasswordFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.natsPasswordFile)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("--nats-password-file: %w", err))
	}
	c.natsPassword = strings.TrimRight(string(b), "\r\n")
	if c.natsPassword == "" {
		return daemon.ConfigError(fmt.Errorf("--nats-password-file %s: the file is empty", c.natsPasswordFile))
	}
	return nil
}

func parseSimulate(args []string) (*simulateConfig, error) {
	var c simulateConfig
	f := daemon.NewFlags("simulate")
	c.bind(f)
	if err := daemon.ParseFlags(f, args); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := c.loadSecrets(); err != nil {
		return nil, err
	}
	return &c, nil
}

// runSimulate is `sddr simulate`.
func runSimulate(args []string) error {
	c, err := parseSimulate(args)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(os.Stderr, "sddr-simulate", c.logLevel)
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	return simulate(ctx, c, log)
}

func simulate(ctx context.Context, c *simulateConfig, log *slog.Logger) error {
	cfg := c.sim()
	progress := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sddr_simulate_progress_ratio", Help: "share of the shard's simulation steps done"})
	if c.metricsAddr != "" {
		reg := telemetry.NewRegistry()
		reg.MustRegister(progress)
		health := &telemetry.Health{}
		if err := health.Register(reg); err != nil {
			return err
		}
		health.SetReady(true, "")
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			if err := telemetry.Serve(sctx, c.metricsAddr, reg, health, log); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("metrics server", "err", err)
			}
		}()
	}
	last := time.Now()
	cfg.Progress = func(step, steps int64) {
		progress.Set(float64(step) / float64(max(steps, 1)))
		if time.Since(last) > 30*time.Second || step == steps {
			last = time.Now()
			log.Info("progress", "step", step, "steps", steps)
		}
	}
	var tr sim.Transport
	if cfg.Shards > 1 {
		// IgnoreAuthErrorAbort: a shard reconnecting to a node that has not yet restarted for the
		// simulation's account is refused until that node's turn (docs/chart.md); nats.go would
		// close the connection after two refusals and the shard would die mid-run.
		opts := []nats.Option{nats.Name(fmt.Sprintf("sddr-simulate-%s-%d", c.runID, c.shardIndex)), nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort()}
		if c.natsUser != "" {
			opts = append(opts, nats.UserInfo(c.natsUser, c.natsPassword))
		}
		nc, err := connectRetrying(ctx, log, c.natsURL, natsConnectPatience, opts...)
		if err != nil {
			return fmt.Errorf("connect to NATS: %w", err)
		}
		defer nc.Close()
		t, err := sim.NewNATS(nc, c.runID, c.shardIndex, c.shards)
		if err != nil {
			return err
		}
		t.ReadyTimeout = c.readyTimeout
		defer func() { _ = t.Close() }()
		tr = t
	}
	log.Info("simulating", "run", c.runID, "scenario", cfg.Scenario, "devices", cfg.Devices, "hours", c.hours,
		"interval", cfg.Interval, "friends", cfg.Friends, "shard", cfg.Shard, "shards", cfg.Shards, "seed", cfg.Seed,
		"energy", cfg.Energy)
	r, err := sim.Run(ctx, cfg, tr)
	if err != nil {
		return err
	}
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	if err := writeResult(c.resultFile, append(b, '\n')); err != nil {
		return err
	}
	log.Info("done", "deviceHours", r.DeviceHours, "cpuSeconds", r.CPUSeconds, "wallSeconds", r.WallSeconds,
		"encounters", r.Encounters, "recognitions", r.Recognitions, "crossAdverts", r.CrossAdverts)
	if c.plots != "" {
		if err := writePlots(ctx, c.plots, cfg, log); err != nil {
			return fmt.Errorf("plots: %w", err)
		}
	}
	return nil
}

func writeResult(path string, b []byte) error {
	if path == "" {
		path = "-"
		if _, err := os.Stat(terminationLog); err == nil {
			path = terminationLog
		}
	}
	var w io.Writer = os.Stdout
	if path != "-" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("result file: %w", err)
		}
		defer f.Close()
		w = f
	}
	_, err := w.Write(b)
	return err
}

// writePlots draws the figures of package plots into dir (small sweeps after the shard's run).
func writePlots(ctx context.Context, dir string, cfg sim.Config, log *slog.Logger) error {
	start := time.Now()
	sw := plots.Full
	sw.Energy = cfg.Energy
	if err := plots.Write(ctx, dir, cfg.Seed, sw); err != nil {
		return err
	}
	log.Info("plots written", "dir", dir, "files", plots.Files, "seconds", time.Since(start).Seconds())
	return nil
}

// natsConnectPatience is how long a shard keeps trying to reach NATS at start. Creating an
// EncounterSimulation adds its account, and the NATS reloader restarts the servers to load it:
// a shard started that moment finds no server, or a server without its account yet.
const natsConnectPatience = 2 * time.Minute

// connectRetrying connects to NATS, retrying with backoff for up to patience.
func connectRetrying(ctx context.Context, log *slog.Logger, url string, patience time.Duration, opts ...nats.Option) (*nats.Conn, error) {
	deadline := time.Now().Add(patience)
	wait := 250 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		log.Warn("NATS not reachable yet, retrying", "err", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
