package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestSimulateConfigErrors: every bad setting is a configuration error (exit status 2).
func TestSimulateConfigErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"seed":          {"--seed", "-1"},
		"interval":      {"--interval", "5s"},
		"devices":       {"--devices", "1"},
		"shards no url": {"--shards", "2", "--shard-index", "1"},
		"shard index":   {"--shard-index", "3"},
		"friends":       {"--friends", "300"},
		"scenario":      {"--scenario", "moon"},
		"user no file":  {"--nats-user", "sim"},
		"password file": {"--nats-user", "sim", "--nats-password-file", filepath.Join(t.TempDir(), "missing")},
		"run id":        {"--shards", "2", "--nats-url", "nats://127.0.0.1:1", "--run-id", "a.b"},
		"hours":         {"--hours", "0"},
		"stray":         {"extra"},
		"discovery 0":   {"--discovery-mj", "0"},
		"recognition":   {"--recognition-mj", "-20.2"},
		"answer NaN":    {"--answer-mj", "NaN"},
		"idle too high": {"--idle-bt-joules-per-day", "100001"},
		"epoch":         {"--epoch-change-mj", "1e9"},
		"battery small": {"--battery-joules", "0.5"},
		"battery text":  {"--battery-joules", "big"},
		"epoch short":   {"--epoch", "30s"},
		"epoch < ival":  {"--epoch", "90s", "--interval", "2m"},
		"epoch long":    {"--epoch", "25h"},
		"epoch 256":     {"--epoch", "5h", "--interval", "1m"},
		"epoch frac":    {"--epoch", "15m0.5s"},
		"epoch neg":     {"--epoch", "-15m"},
		"jitter neg":    {"--epoch-jitter", "-1s"},
		"jitter long":   {"--epoch", "10m", "--epoch-jitter", "11m"},
		"revoke frac":   {"--revoke-fraction", "1.5"},
		"revoke NaN":    {"--revoke-fraction", "NaN"},
		"revoke at 0":   {"--revoke-at", "0"},
		"revoke at 1":   {"--revoke-at", "1"},
	} {
		if _, err := parseSimulate(args); !errors.Is(err, daemon.ErrConfig) {
			t.Errorf("%s: %v, want a configuration error", name, err)
		}
	}
}

// TestShardIndexFromIndexedJob: an Indexed Job sets JOB_COMPLETION_INDEX; the flag wins.
func TestShardIndexFromIndexedJob(t *testing.T) {
	t.Setenv("JOB_COMPLETION_INDEX", "1")
	c, err := parseSimulate([]string{"--shards", "2", "--nats-url", "nats://127.0.0.1:4222", "--run-id", "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.shardIndex != 1 {
		t.Fatalf("shard index %d, want 1 from JOB_COMPLETION_INDEX", c.shardIndex)
	}
	c, err = parseSimulate([]string{"--shards", "2", "--nats-url", "nats://127.0.0.1:4222", "--shard-index", "0"})
	if err != nil || c.shardIndex != 0 {
		t.Fatalf("flag: %v %v", c, err)
	}
	t.Setenv("JOB_COMPLETION_INDEX", "x")
	if _, err := parseSimulate(nil); !errors.Is(err, daemon.ErrConfig) {
		t.Fatalf("JOB_COMPLETION_INDEX=x: %v", err)
	}
}

// TestSimulateWritesContract: one shard writes one valid contract.Result to --result-file.
func TestSimulateWritesContract(t *testing.T) {
	out := filepath.Join(t.TempDir(), "result.json")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseSimulate([]string{"--devices", "60", "--hours", "1", "--scenario", "groups", "--friends", "2",
		"--seed", "18446744073709551615", "--result-file", out, "--run-id", "cli", "--nats-user", "u", "--nats-password-file", pw})
	if err != nil {
		t.Fatal(err)
	}
	if c.natsPassword != "secret" {
		t.Fatal("password file not read")
	}
	if err := simulate(t.Context(), c, telemetry.Discard()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > contract.MaxBytes {
		t.Fatalf("%d bytes", len(b))
	}
	r, err := contract.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seed != 18446744073709551615 || r.RunID != "cli" || r.Devices != 60 || r.Recognitions == 0 || !r.Complete() {
		t.Fatalf("result: %+v", r)
	}
	if r.Energy != contract.PaperEnergy {
		t.Fatalf("energy %+v without flags, want the paper's", r.Energy)
	}
}

// simulateGroups runs a 12-device groups simulation of the given hours and friends per
// device (p-det 1) with the extra flags args, and returns the result file it wrote.
func simulateGroups(t *testing.T, hours, friends string, args ...string) *contract.Result {
	t.Helper()
	out := filepath.Join(t.TempDir(), "result.json")
	c, err := parseSimulate(append([]string{"--devices", "12", "--hours", hours, "--scenario", "groups", "--group-size", "6",
		"--friends", friends, "--p-det", "1", "--result-file", out}, args...))
	if err != nil {
		t.Fatal(err)
	}
	if err := simulate(t.Context(), c, telemetry.Discard()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := contract.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSimulateEnergyFlags: each coefficient of Equation 1 from its flag (or its
// OBSCURA_<FLAG> variable, as the operator passes it) reaches the result, and the battery
// figure follows: a battery twice as large halves battery %/day of the same run.
func TestSimulateEnergyFlags(t *testing.T) {
	run := func(args ...string) *contract.Result {
		t.Helper()
		return simulateGroups(t, "1", "1", args...)
	}
	t.Setenv("OBSCURA_ANSWER_MJ", "9.25")
	a := run("--idle-bt-joules-per-day", "150", "--epoch-change-mj", "600", "--discovery-mj", "1200.5", "--recognition-mj", "25")
	want := contract.Energy{IdleBluetoothJoulesPerDay: 150, EpochChangeMillijoules: 600, DiscoveryMillijoules: 1200.5,
		RecognitionMillijoules: 25, AnswerMillijoules: 9.25, BatteryJoules: 23328}
	if a.Energy != want {
		t.Fatalf("energy %+v, want %+v", a.Energy, want)
	}
	b := run("--idle-bt-joules-per-day", "150", "--epoch-change-mj", "600", "--discovery-mj", "1200.5", "--recognition-mj", "25",
		"--battery-joules", "46656")
	if b.Energy.BatteryJoules != 46656 || b.Classes[0].Joules != a.Classes[0].Joules {
		t.Fatalf("battery %v, joules %v vs %v", b.Energy.BatteryJoules, b.Classes[0].Joules, a.Classes[0].Joules)
	}
	if got, want := b.Classes[0].BatteryPercentPerDay, a.Classes[0].BatteryPercentPerDay/2; math.Abs(got-want) > 1e-9*want {
		t.Fatalf("a battery twice as large: %v %%/day, want %v", got, want)
	}
}

// TestShardWaitsForNATS: a shard started while NATS is down (the reloader restarting it for the
// simulation's new account) keeps trying and connects once the server is up, instead of
// exiting and using up the Job's retries.
func TestShardWaitsForNATS(t *testing.T) {
	l, err := net.Listen("tcp", testenv.Host+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	go func() {
		time.Sleep(time.Second) // the server comes up after the shard started
		testenv.StartNATS(t, testenv.WithNATSOptions(func(o *server.Options) { o.Port = port }))
	}()
	nc, err := connectRetrying(t.Context(), slog.New(slog.DiscardHandler), fmt.Sprintf("nats://%s:%d", testenv.Host, port), time.Minute)
	if err != nil {
		t.Fatalf("shard gave up: %v", err)
	}
	nc.Close()
	if _, err := connectRetrying(t.Context(), slog.New(slog.DiscardHandler), "nats://127.0.0.1:1", 300*time.Millisecond); err == nil {
		t.Fatal("connected to nothing")
	}
}

// TestSimulateEpochAndRevocationFlags: --epoch, --epoch-jitter, --revoke-fraction and
// --revoke-at (or their OBSCURA_<FLAG> variables, as the operator passes them) reach the run
// and its result: a 5-minute epoch without jitter starts ≈ 3× the epoch keys of the default,
// and a revocation fraction of 0 leaves no revoked encounter.
func TestSimulateEpochAndRevocationFlags(t *testing.T) {
	run := func(args ...string) *contract.Result {
		t.Helper()
		return simulateGroups(t, "2", "2", args...)
	}
	def := run()
	if def.EpochSeconds != 900 || def.EpochJitterSeconds != 60 || def.RevokeFraction != 0.1 || def.RevokeAt != 0.5 {
		t.Fatalf("defaults reported as epoch %v s, jitter %v s, revoke %v at %v", def.EpochSeconds, def.EpochJitterSeconds, def.RevokeFraction, def.RevokeAt)
	}
	t.Setenv("OBSCURA_EPOCH_JITTER", "0s")
	t.Setenv("OBSCURA_REVOKE_FRACTION", "0")
	short := run("--epoch", "5m")
	if short.EpochSeconds != 300 || short.EpochJitterSeconds != 0 || short.RevokeFraction != 0 || short.RevokedEncounters != 0 {
		t.Fatalf("--epoch 5m, no jitter, nobody revokes: %+v", short)
	}
	if ratio := float64(short.EpochKeys) / float64(def.EpochKeys); ratio < 2.5 || ratio > 3.5 {
		t.Fatalf("epoch keys %d at 5 min vs %d at 15 min (+ ≤ 60 s jitter): ratio %.2f, want ≈ 3", short.EpochKeys, def.EpochKeys, ratio)
	}
}
