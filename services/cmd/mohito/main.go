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
// and the NATS server's sidecar, which makes it reload the accounts the operator renders:
//
//	mohito nats-reloader --watch <file> --pid-file <file>
//
// and the tools around a deployment: probe (Kubernetes exec probe), provision
// (keys, registries and tokens for a cluster), drive (load from outside,
// through the TLS edge and MQTT) and smoke (helm test).
//
// Demo and loadgen flags fall back to MOHITO_<FLAG>; the daemons' flags fall
// back to OBSCURA_* variables (package envflag). A configuration error, a
// malformed environment value included, exits with status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/envflag"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	pdasim "github.com/obscura-iot/obscura/services/pkg/pda/sim"
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
	case "probe":
		err = runProbe(os.Args[2:])
	case "provision":
		err = runProvision(os.Args[2:], os.Stdout)
	case "drive":
		err = runDrive(os.Args[2:], os.Stdout)
	case "smoke":
		err = runSmoke(os.Args[2:], os.Stdout)
	case "nats-reloader":
		err = runNATSReloader(os.Args[2:])
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
	fmt.Fprintln(os.Stderr, "usage: mohito demo|loadgen|gateway|coordinator|decrypt-worker|encoder|responder|shuffler|vendor-agent|probe|provision|drive|smoke|nats-reloader [flags]   (mohito <cmd> -h for flags)")
}

// Config is the demo/loadgen configuration.
type Config struct {
	loadgen.Options
	RedisAddr string
	Metrics   string
	// Aggregation (demo only): after the rounds, run one PDA aggregation in the same
	// process (pdasim.RunDemo) and include it in the summary.
	Aggregation bool
	PDA         pdasim.DemoOptions
}

func run(args []string, demo bool) error {
	c, err := parseRun(args, demo)
	if err != nil {
		return err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	_, err = execute(ctx, c, os.Stdout)
	return err
}

// parseRun parses and validates the demo or loadgen command line.
func parseRun(args []string, demo bool) (*Config, error) {
	name := "loadgen"
	defRounds, defUsers, defDevices, defVendors := 200, 200, 600, 5
	if demo {
		name = "demo"
		defRounds, defUsers, defDevices, defVendors = 20, 24, 60, 3
	}
	f := envflag.New(name, "MOHITO_")
	var (
		c      Config
		natsPW string
	)
	f.Int(&c.Vendors, "vendors", defVendors, "number of vendors")
	f.Int(&c.Devices, "devices", defDevices, "total devices")
	f.Float64(&c.Skew, "skew", 1.0, "power-law skew of device counts over vendors (0 = uniform)")
	f.Int(&c.Users, "users", defUsers, "number of users")
	f.Int(&c.Rounds, "rounds", defRounds, "rounds to run before the summary")
	f.Duration(&c.Round, "round", 500*time.Millisecond, "round period T")
	f.Int(&c.CommandSize, "command-size", 1024, "padded command size L_c (bytes)")
	f.Int(&c.PayloadSize, "payload", 64, "command payload bytes")
	f.Duration(&c.Think, "think", 0, "pause between a user's commands (sets the rate)")
	f.Int(&c.DecryptWorkers, "decrypt-workers", 2, "decrypt workers")
	f.Int(&c.Encoders, "encoders", 2, "OKVS encoder partitions")
	f.Int(&c.Gateways, "gateways", 2, "gateway replicas")
	f.Int(&c.Capacity, "headroom", 2, "C_v headroom over the expected per-round load")
	f.String(&c.NATSURL, "nats-url", "", "external NATS with the Obscura accounts (empty: embedded)")
	f.String(&natsPW, "nats-password-suffix", "", "password = user + suffix (external NATS)")
	f.String(&c.RedisAddr, "redis-addr", "", "integrator Redis (empty: in-memory, demo only)")
	f.String(&c.JSONPath, "json", "", "write the summary as JSON here")
	f.String(&c.CSVPath, "csv", "", "write the per-round table as CSV here")
	f.Bool(&c.Baseline, "jetstream-baseline", false, "after the run, measure raw JetStream publish+consume at -command-size on the same server")
	f.String(&c.Metrics, "metrics-addr", "", "serve /metrics /healthz /readyz here (e.g. 127.0.0.1:9090)")
	if demo {
		c.PDA = pdasim.DefaultDemoOptions()
		f.Bool(&c.Aggregation, "aggregation", true, "after the rounds, run one PDA aggregation (vendors pool attacking source IPs; only IPs reported by ≥ τ are revealed) on its own embedded NATS")
		f.Int(&c.PDA.Participants, "aggregation-participants", c.PDA.Participants, "PDA participants (simulated vendors)")
		f.Int(&c.PDA.Threshold, "aggregation-threshold", c.PDA.Threshold, "PDA threshold τ")
		f.Int(&c.PDA.Benign, "aggregation-benign", c.PDA.Benign, "benign IPs per PDA participant")
		f.Int(&c.PDA.Shards, "aggregation-shards", c.PDA.Shards, "PDA DB shards")
	}
	if err := parseFlags(f, args); err != nil {
		return nil, err
	}
	if err := validate(&c); err != nil {
		return nil, err
	}
	if c.NATSURL != "" {
		c.Password = func(u string) string { return u + natsPW }
	}
	if c.RedisAddr != "" {
		c.Store = roundstate.NewRedis(redis.NewClient(&redis.Options{Addr: c.RedisAddr}), 10*time.Minute)
	}
	return &c, nil
}

// Result is what a demo or loadgen run did.
type Result struct {
	Rounds      *loadgen.Summary
	Aggregation *pdasim.DemoSummary // nil unless Config.Aggregation
}

// execute runs the rounds and then, with c.Aggregation, one PDA aggregation, narrating on out.
func execute(ctx context.Context, c *Config, out io.Writer) (*Result, error) {
	c.Out = out
	s, err := loadgen.Run(ctx, c.Options)
	if err != nil {
		return nil, err
	}
	r := &Result{Rounds: s}
	if !c.Aggregation {
		return r, nil
	}
	fmt.Fprintf(out, "\n--- one PDA aggregation: vendors pool the source IPs that attacked their fleets; only IPs reported by ≥ τ = %d of them are revealed ---\n", c.PDA.Threshold)
	if r.Aggregation, err = pdasim.RunDemo(ctx, c.PDA, out); err != nil {
		return r, fmt.Errorf("aggregation: %w", err)
	}
	printSummary(out, r)
	return r, nil
}

// printSummary prints the final summary of a demo with an aggregation.
func printSummary(out io.Writer, r *Result) {
	s, a := r.Rounds, r.Aggregation
	fmt.Fprintf(out, "\ndemo summary:\n")
	fmt.Fprintf(out, "  mohito:      %d rounds (%d aborted), %d commands answered (%d unfinished at stop), exactly-once delivery: %v\n",
		s.Rounds, s.Aborted, s.Commands, s.Failed, s.ExactlyOnce)
	fmt.Fprintf(out, "  aggregation: %d participants, τ = %d, %d submissions (%d accepted), window %d\n",
		a.Participants, a.Threshold, a.Submissions, a.Accepted, a.Window)
	var rev []string
	for _, k := range a.Revealed {
		rev = append(rev, fmt.Sprintf("%s (%d)", k.Key, k.Count))
	}
	if len(rev) == 0 {
		rev = []string{"none"}
	}
	fmt.Fprintf(out, "               revealed %d: %s; exactly the keys reported by ≥ τ: %v\n", len(a.Revealed), strings.Join(rev, ", "), a.Exact())
	var below []string
	for _, k := range a.Withheld {
		below = append(below, fmt.Sprintf("%s (%d)", k.Key, k.Count))
	}
	counts := make([]int, 0, len(a.NotRevealed))
	keys := 0
	for n, k := range a.NotRevealed {
		counts = append(counts, n)
		keys += k
	}
	slices.Sort(counts)
	slices.Reverse(counts)
	var hist []string
	for _, n := range counts {
		hist = append(hist, fmt.Sprintf("%d seen by %d", a.NotRevealed[n], n))
	}
	if len(below) == 0 {
		below = []string{"none"}
	}
	fmt.Fprintf(out, "               not revealed (< τ): attacker IPs %s; %d keys in all (%s)\n", strings.Join(below, ", "), keys, strings.Join(hist, ", "))
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
	if c.Aggregation && c.PDA.Validate() != nil {
		bad = append(bad, "-aggregation-participants ≥ 2, -aggregation-threshold ≥ 1, -aggregation-shards ≥ 1 and -aggregation-benign ≥ 0 are required")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(bad, "; "))
	}
	return nil
}
