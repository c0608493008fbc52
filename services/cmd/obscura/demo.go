package main

import (
	pdasim "github.com/obscura-iot/obscura/services/pkg/pda/sim"
	ppssim "github.com/obscura-iot/obscura/services/pkg/pps/sim"

	loissim "github.com/obscura-iot/obscura/services/pkg/lois/sim"
	sddrsim "github.com/obscura-iot/obscura/services/pkg/sddr/sim"

	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/obscura-iot/obscura/services/pkg/daemon"
	"github.com/obscura-iot/obscura/services/pkg/mohito/loadgen"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// Config is the demo configuration: the Mohito rounds, the PDA aggregation and the PPS
// pipeline after them.
type Config struct {
	loadgen.Options
	// Aggregation (demo only): after the rounds, run one PDA aggregation in the same
	// process (pdasim.RunDemo) and include it in the summary.
	Aggregation bool
	PDA         pdasim.DemoOptions
	// PPS (demo only): then run one PPS pipeline computing the parking statistics in the
	// same process (ppssim.RunDemo) and include it in the summary.
	PPS     bool
	PPSDemo ppssim.DemoOptions
	// LOIS (demo only): then one device's HTTP exchange through the LOIS interfaces in the
	// same process (loissim.RunDemo), its header fields shown before and after protection.
	LOIS bool
	// SDDR (demo only): then a few simulated devices meet, recognise their friends, one
	// revokes a friend, and two exchange sealed messages through the encounter mailbox
	// (sddrsim.RunDemo).
	SDDR bool
}

func runDemo(args []string) error {
	c, err := parseDemo(args)
	if err != nil {
		return err
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	_, err = execute(ctx, c, os.Stdout)
	return err
}

// parseDemo parses and validates the demo's command line.
func parseDemo(args []string) (*Config, error) {
	f := daemon.NewFlags("demo")
	var c Config
	c.Options.Bind(f, loadgen.DemoDefaults)
	c.PDA = pdasim.DefaultDemoOptions()
	f.Bool(&c.Aggregation, "aggregation", true, "after the rounds, run one PDA aggregation (vendors pool attacking source IPs; only IPs reported by ≥ τ are revealed) on its own embedded NATS")
	f.Int(&c.PDA.Participants, "aggregation-participants", c.PDA.Participants, "PDA participants (simulated vendors)")
	f.Int(&c.PDA.Threshold, "aggregation-threshold", c.PDA.Threshold, "PDA threshold τ")
	f.Int(&c.PDA.Benign, "aggregation-benign", c.PDA.Benign, "benign IPs per PDA participant")
	f.Int(&c.PDA.Shards, "aggregation-shards", c.PDA.Shards, "PDA DB shards")
	c.PPSDemo = ppssim.DefaultDemoOptions()
	f.Bool(&c.PPS, "pps", true, "then run one PPS pipeline: 9 parking lots publish wire labels over MQTT, the broker evaluates the garbler's circuit for the day's mean/max/min of the combined count, a subscriber decodes it next to the plaintext")
	f.Int(&c.PPSDemo.Rounds, "pps-rounds", c.PPSDemo.Rounds, "PPS rounds each lot publishes per simulated day (divides 288; 288 is the paper's every 5 minutes)")
	f.Int(&c.PPSDemo.Days, "pps-days", c.PPSDemo.Days, "PPS simulated days, one execution each")
	f.Bool(&c.LOIS, "lois", true, "then one LOIS exchange: a device's HTTP GET crosses the device, cloud and server interfaces (in-process, no TUN or root), its header fields shown before protection, on the wire and after recovery")
	f.Bool(&c.SDDR, "sddr", true, "then SDDR secure encounters: 4 simulated devices meet and recognise their friends (not the stranger), a revoked friend stops recognising, and two exchange AEAD-sealed messages through the encounter mailbox (in-process, its own Redis)")
	if err := daemon.ParseFlags(f, args); err != nil {
		return nil, err
	}
	if err := validate(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Result is what a demo run did.
type Result struct {
	Rounds      *loadgen.Summary
	Aggregation *pdasim.DemoSummary  // nil unless Config.Aggregation
	PPS         *ppssim.DemoSummary  // nil unless Config.PPS
	LOIS        *loissim.DemoSummary // nil unless Config.LOIS
	SDDR        *sddrsim.DemoSummary // nil unless Config.SDDR
}

// execute runs the rounds and then, with c.Aggregation, one PDA aggregation and, with c.PPS,
// one PPS pipeline, narrating on out.
func execute(ctx context.Context, c *Config, out io.Writer) (*Result, error) {
	c.Out = out
	s, err := loadgen.Run(ctx, c.Options)
	if err != nil {
		return nil, err
	}
	r := &Result{Rounds: s}
	if c.Aggregation {
		fmt.Fprintf(out, "\n--- one PDA aggregation: vendors pool the source IPs that attacked their fleets; only IPs reported by ≥ τ = %d of them are revealed ---\n", c.PDA.Threshold)
		if r.Aggregation, err = pdasim.RunDemo(ctx, c.PDA, out); err != nil {
			return r, fmt.Errorf("aggregation: %w", err)
		}
	}
	if c.PPS {
		fmt.Fprintf(out, "\n--- one PPS pipeline: 9 parking lots publish one wire label per bit of each count; the broker evaluates a garbled circuit for the day's mean/max/min of the combined count without seeing a count; only the subscriber unmasks it ---\n")
		if r.PPS, err = ppssim.RunDemo(ctx, c.PPSDemo, out); err != nil {
			return r, fmt.Errorf("pps: %w", err)
		}
	}
	if c.LOIS {
		fmt.Fprintf(out, "\n--- one LOIS exchange: a device's HTTP GET with its packet headers hidden from the network (one-time keystreams, one unified port) ---\n")
		if r.LOIS, err = loissim.RunDemo(ctx, loissim.DefaultDemoOptions(), out); err != nil {
			return r, fmt.Errorf("lois: %w", err)
		}
	}
	if c.SDDR {
		fmt.Fprintf(out, "\n--- SDDR secure encounters: devices recognise friends from rotating beacons, strangers cannot link them; friends that met leave each other sealed messages in an untrusted mailbox ---\n")
		if r.SDDR, err = sddrsim.RunDemo(ctx, out); err != nil {
			return r, fmt.Errorf("sddr: %w", err)
		}
	}
	if c.Aggregation || c.PPS || c.LOIS || c.SDDR {
		printSummary(out, r)
	}
	return r, nil
}

// printSummary prints the final summary of a demo with an aggregation or a PPS pipeline.
func printSummary(out io.Writer, r *Result) {
	s := r.Rounds
	fmt.Fprintf(out, "\ndemo summary:\n")
	fmt.Fprintf(out, "  mohito:      %d rounds (%d aborted), %d commands answered (%d unfinished at stop), exactly-once delivery: %v\n",
		s.Rounds, s.Aborted, s.Commands, s.Failed, s.ExactlyOnce)
	if r.Aggregation != nil {
		printAggregation(out, r.Aggregation)
	}
	if p := r.PPS; p != nil {
		var gates, bytes uint64
		if len(p.Executions) > 0 {
			gates, bytes = p.Executions[0].ANDGates, p.Executions[0].Bytes
		}
		fmt.Fprintf(out, "  pps:         %d lots × %d rounds a day, %d executions (%d AND gates, %.2f MB garbled each), subscriber's mean/max/min equal to the plaintext: %v\n",
			p.Lots, p.Rounds, len(p.Executions), gates, float64(bytes)/1e6, p.Exact())
	}
	if l := r.LOIS; l != nil {
		fmt.Fprintf(out, "  lois:        %d packets of an HTTP exchange, device received %q, no original header field on the wire: %v, endpoints saw the real headers: %v\n",
			l.Packets, l.Response, l.WireClean, l.ServerSawDevice)
	}
	if d := r.SDDR; d != nil {
		fmt.Fprintf(out, "  sddr:        %d devices, friends recognised exactly: %v, revoked friend stops recognising: %v, mailbox exchange opened %q: %v, mailbox stores ciphertext under opaque addresses only: %v\n",
			d.Devices, d.FriendsExact, d.RevokedStops, d.Opened, d.Exchanged, d.StoreOpaque)
	}
}

// printAggregation prints the aggregation's lines of the summary.
func printAggregation(out io.Writer, a *pdasim.DemoSummary) {
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
	bad := c.Options.Validate()
	if c.Aggregation && c.PDA.Validate() != nil {
		bad = append(bad, "--aggregation-participants ≥ 2, --aggregation-threshold ≥ 1, --aggregation-shards ≥ 1 and --aggregation-benign ≥ 0 are required")
	}
	if c.PPS && c.PPSDemo.Validate() != nil {
		bad = append(bad, "--pps-rounds must divide 288 (e.g. 12, 24, 48, 96, 288) and --pps-days must be ≥ 1")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(bad, "; "))
	}
	return nil
}
