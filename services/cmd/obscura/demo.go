package main

import (
	pdasim "github.com/obscura-iot/obscura/services/pkg/pda/sim"

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

// Config is the demo configuration: the Mohito rounds and the PDA aggregation after them.
type Config struct {
	loadgen.Options
	// Aggregation (demo only): after the rounds, run one PDA aggregation in the same
	// process (pdasim.RunDemo) and include it in the summary.
	Aggregation bool
	PDA         pdasim.DemoOptions
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
	bad := c.Options.Validate()
	if c.Aggregation && c.PDA.Validate() != nil {
		bad = append(bad, "-aggregation-participants ≥ 2, -aggregation-threshold ≥ 1, -aggregation-shards ≥ 1 and -aggregation-benign ≥ 0 are required")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(bad, "; "))
	}
	return nil
}
