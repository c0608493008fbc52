package main

import (
	"context"
	"errors"
	"os"

	pdasim "github.com/obscura-iot/obscura/services/pkg/pda/sim"
	"github.com/obscura-iot/obscura/services/pkg/telemetry"
)

// runDemo runs one aggregation in one process (pdasim.RunDemo): an embedded NATS with the
// two trust-domain accounts, every role, in-memory twins of the Redis stores, and
// simulated participants (vendors reporting suspect source IPs; a few attacker IPs hit
// many of them).
func runDemo(args []string) error {
	f := newFlags("demo")
	o := pdasim.DefaultDemoOptions()
	f.Int(&o.Participants, "participants", o.Participants, "participants")
	f.Int(&o.Threshold, "threshold", o.Threshold, "τ")
	f.Int(&o.Benign, "benign", o.Benign, "benign IPs per participant")
	f.Int(&o.Shards, "shards", o.Shards, "DB shards")
	if err := parseFlags(f, args); err != nil {
		return err
	}
	if o.Validate() != nil {
		return configErr(errors.New("--participants ≥ 2, --threshold ≥ 1, --shards ≥ 1 and --benign ≥ 0 are required"))
	}
	ctx, cancel := telemetry.SignalContext(context.Background())
	defer cancel()
	_, err := pdasim.RunDemo(ctx, o, os.Stdout)
	return err
}
