package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
	ppssim "github.com/obscura-iot/obscura/services/pkg/pps/sim"
)

// TestDemoWithAggregation runs the combined demo (rounds, then one PDA aggregation in the
// same process) with small settings: Mohito must deliver exactly once and the aggregation
// must reveal exactly the keys reported by at least τ participants.
func TestDemoWithAggregation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded demo")
	}
	_, r, out := demoRun(t, 60*time.Second, []string{"-rounds", "3", "-round", "200ms", "-vendors", "2", "-devices", "8", "-users", "6",
		"-aggregation-participants", "4", "-aggregation-threshold", "2", "-aggregation-benign", "5", "-aggregation-shards", "2"})
	if s := r.Rounds; s.Rounds != 3 || s.Commands == 0 || !s.ExactlyOnce {
		t.Errorf("rounds summary %d rounds, %d commands, exactly-once %v; want 3 rounds, commands, exactly-once", s.Rounds, s.Commands, s.ExactlyOnce)
	}
	a := r.Aggregation
	if a == nil {
		t.Fatal("no aggregation summary")
	}
	// 4 participants, τ = 2: the attackers hit 4, 4, 2, 1, 2 and 1 participants; the
	// 20 benign IPs are one participant's each.
	want := map[string]int{"203.0.113.7": 4, "203.0.113.23": 4, "198.51.100.66": 2, "203.0.113.99": 2}
	got := map[string]int{}
	for _, k := range a.Revealed {
		got[k.Key] = k.Count
	}
	if !maps.Equal(got, want) {
		t.Errorf("revealed %v, want exactly %v", got, want)
	}
	if !a.Exact() || a.Participants != 4 || a.Threshold != 2 || a.Submissions != 4+4+2+1+2+1+4*5 {
		t.Errorf("aggregation summary %+v", a)
	}
	if a.NotRevealed[1] != 2+20 || len(a.Withheld) != 2 {
		t.Errorf("not revealed %v, withheld %v; want 22 keys seen once, 2 attacker IPs withheld", a.NotRevealed, a.Withheld)
	}
	for _, s := range []string{"exactly-once delivery: true", "demo summary:", "exactly the keys reported by ≥ τ: true",
		"not revealed (< τ): attacker IPs 192.0.2.200 (1), 198.51.100.1 (1); 22 keys in all (22 seen by 1)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

func TestAggregationFlag(t *testing.T) {
	quiet(t)
	c, err := parseDemo(nil)
	if err != nil || !c.Aggregation || c.PDA.Participants != 8 || c.PDA.Threshold != 3 {
		t.Fatalf("demo defaults: %+v, %v; want the aggregation on with 8 participants, τ = 3", c, err)
	}
	t.Setenv("OBSCURA_AGGREGATION", "false")
	if c, err := parseDemo(nil); err != nil || c.Aggregation {
		t.Fatalf("OBSCURA_AGGREGATION=false: aggregation %v, %v", c != nil && c.Aggregation, err)
	}
	if _, err := parseDemo([]string{"-aggregation-threshold", "0"}); err != nil {
		t.Errorf("an invalid aggregation setting with the aggregation off: %v", err)
	}
	t.Setenv("OBSCURA_AGGREGATION", "true")
	if _, err := parseDemo([]string{"-aggregation-participants", "1"}); !errors.Is(err, errConfig) {
		t.Errorf("-aggregation-participants 1: %v, want a configuration error", err)
	}
}

// quiet discards what the flag package prints (usage on a bad command line).
func quiet(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = null
	t.Cleanup(func() { os.Stderr = stderr; null.Close() })
}

// TestDemoWithPPS runs the demo with its PPS pipeline (and small Mohito rounds): every
// simulated day must execute, and the subscriber's decoded mean/max/min must equal the
// plaintext model of the generated data exactly (Q24.8), which the test recomputes.
func TestDemoWithPPS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded demo")
	}
	c, r, out := demoRun(t, 3*time.Minute, []string{"-rounds", "2", "-round", "200ms", "-vendors", "2", "-devices", "4", "-users", "3",
		"-aggregation=false", "-pps-rounds", "6", "-pps-days", "2"})
	p := r.PPS
	if r.Aggregation != nil || p == nil {
		t.Fatalf("aggregation %v, pps %v: want only the PPS part", r.Aggregation, p)
	}
	if len(p.Executions) != 2 {
		t.Fatalf("%d PPS executions, want 2\n%s", len(p.Executions), out.String())
	}
	f, err := dsl.Compile(ppssim.DemoProgram(6))
	if err != nil {
		t.Fatal(err)
	}
	for d, e := range p.Executions {
		want, err := ppssim.DemoDay(c.PPSDemo.Seed, d, 6).Evaluate(f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(e.Got, want) || len(want) != 3 {
			t.Errorf("day %d: subscriber decoded %v, plaintext model %v", d+1, e.Got, want)
		}
		if e.Valid != 9*6 || e.ANDGates == 0 || e.Bytes == 0 {
			t.Errorf("day %d: %d valid inputs, %d AND gates, %d bytes", d+1, e.Valid, e.ANDGates, e.Bytes)
		}
	}
	for _, s := range []string{"demo summary:", "pps:         9 lots × 6 rounds a day, 2 executions", "equal to the plaintext: true"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

func TestPPSFlag(t *testing.T) {
	quiet(t)
	c, err := parseDemo(nil)
	if err != nil || !c.PPS || c.PPSDemo != ppssim.DefaultDemoOptions() {
		t.Fatalf("demo defaults: %+v, %v; want PPS on with its defaults", c, err)
	}
	t.Setenv("OBSCURA_PPS", "false")
	if c, err := parseDemo([]string{"-pps-rounds", "7"}); err != nil || c.PPS {
		t.Fatalf("OBSCURA_PPS=false: pps %v, %v; an invalid PPS setting with PPS off must pass", c != nil && c.PPS, err)
	}
	t.Setenv("OBSCURA_PPS", "true")
	for _, args := range [][]string{{"-pps-rounds", "7"}, {"-pps-rounds", "0"}, {"-pps-days", "0"}} {
		if _, err := parseDemo(args); !errors.Is(err, errConfig) {
			t.Errorf("%v: %v, want a configuration error", args, err)
		}
	}
}

// TestDemoWithLOIS runs the demo with its LOIS exchange only (and small Mohito rounds): the
// device's GET is answered, and the wire shows none of the header fields the endpoints used.
func TestDemoWithLOIS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded demo")
	}
	_, r, out := demoRun(t, 60*time.Second, []string{"-rounds", "2", "-round", "200ms", "-vendors", "2", "-devices", "4", "-users", "3",
		"-aggregation=false", "-pps=false"})
	l := r.LOIS
	if r.PPS != nil || l == nil || l.Packets != 5 || !l.WireClean || !l.ServerSawDevice || l.Response != "HTTP/1.1 200 OK" {
		t.Fatalf("lois summary %+v\n%s", l, out.String())
	}
	if !strings.Contains(out.String(), "  lois:        5 packets") {
		t.Errorf("no LOIS line in the summary:\n%s", out.String())
	}
}

// TestDemoWithSDDR runs the demo with its SDDR part only (and small Mohito rounds): friends
// recognise each other and not the stranger, a revoked friend stops recognising, and two
// devices exchange sealed messages through the mailbox, which stores only ciphertext.
func TestDemoWithSDDR(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded demo")
	}
	_, r, out := demoRun(t, 60*time.Second, []string{"-rounds", "2", "-round", "200ms", "-vendors", "2", "-devices", "4", "-users", "3",
		"-aggregation=false", "-pps=false", "-lois=false"})
	if s := r.SDDR; r.LOIS != nil || s == nil || !s.Exact() || s.Devices != 4 {
		t.Fatalf("sddr summary %+v\n%s", s, out.String())
	}
	if !strings.Contains(out.String(), "  sddr:        4 devices, friends recognised exactly: true, revoked friend stops recognising: true") {
		t.Errorf("no SDDR line in the summary:\n%s", out.String())
	}
}

// demoRun runs the embedded demo with args for at most d and returns its configuration,
// summary and output; a demo that fails ends the test with its output.
func demoRun(t *testing.T, d time.Duration, args []string) (*Config, *Result, *bytes.Buffer) {
	t.Helper()
	c, err := parseDemo(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out bytes.Buffer
	r, err := execute(ctx, c, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return c, r, &out
}
