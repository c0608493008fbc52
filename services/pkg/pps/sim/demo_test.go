package sim

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// TestRunDemo runs the demo's pipeline end to end (NATS with MQTT, the garbler and the
// broker over mutual TLS, each with its own Redis, 9 publishers and a subscriber) for two
// simulated days, and checks what the subscriber decoded against a plaintext model the test
// computes itself from the generated data: exactly equal to the Q24.8 model, and within the
// truncation's tolerance of the float64 statistics.
func TestRunDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded PPS demo")
	}
	o := DemoOptions{Rounds: 12, Days: 2, Seed: 7}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	s, err := RunDemo(ctx, o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if len(s.Executions) != o.Days {
		t.Fatalf("%d executions, want one per day (%d)", len(s.Executions), o.Days)
	}
	f := compile(t, DemoProgram(o.Rounds))
	if s.Fn != f.ID {
		t.Fatalf("function %s, want %s", s.Fn, f.ID)
	}
	slots := ParkingLots * o.Rounds
	for d, e := range s.Executions {
		ds := DemoDay(o.Seed, d, o.Rounds)
		want, err := ds.Evaluate(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Got) != 3 || len(want) != 3 {
			t.Fatalf("day %d: subscriber decoded %d outputs, model %d; want mean, max, min", d+1, len(e.Got), len(want))
		}
		for i, name := range demoStatistics {
			if e.Got[i] != want[i] {
				t.Errorf("day %d %s: subscriber %v, Q24.8 model %v", d+1, name, e.Got[i].Float64(), want[i].Float64())
			}
		}
		// The statistics straight from the counts, independently of the circuit's model.
		combined := make([]float64, o.Rounds)
		for _, series := range ds.Series {
			for t0, v := range series.Values {
				combined[t0] += v.Float64()
			}
		}
		var sum, mx, mn = 0.0, math.Inf(-1), math.Inf(1)
		for _, c := range combined {
			sum, mx, mn = sum+c, math.Max(mx, c), math.Min(mn, c)
		}
		for i, w := range []float64{sum / float64(o.Rounds), mx, mn} {
			if diff := math.Abs(e.Got[i].Float64() - w); diff > 1.0/128 {
				t.Errorf("day %d %s: subscriber %v, float64 %v", d+1, demoStatistics[i], e.Got[i].Float64(), w)
			}
		}
		// Check is the consistency check's time left at the tick: 0 when it ran during the
		// window (day 2 under make test); Valid is what the check decided.
		if !e.Match() || e.Valid != slots || e.ANDGates == 0 || e.Bytes == 0 || e.Check < 0 || e.Evaluate <= 0 {
			t.Errorf("day %d execution %+v: want a match over %d valid inputs with its gates, bytes and phases", d+1, e, slots)
		}
	}
	if s.Executions[0].Got[0] == s.Executions[1].Got[0] && s.Executions[0].Got[1] == s.Executions[1].Got[1] {
		t.Error("two days gave the same statistics: the second execution did not read the second day")
	}
	if !s.Exact() || s.Published != o.Days*slots {
		t.Errorf("summary: exact %v, %d publishes stored (want %d)", s.Exact(), s.Published, o.Days*slots)
	}
	if strings.Count(out.String(), "✓") != 3*o.Days || strings.Contains(out.String(), "✗") {
		t.Errorf("output does not show %d matches:\n%s", 3*o.Days, out.String())
	}
	var zero pps.Fixed
	if s.Executions[0].Got[2] == zero {
		t.Error("minimum of the combined count is 0: the lots published nothing?")
	}
}

func TestDemoOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o  DemoOptions
		ok bool
	}{
		{DefaultDemoOptions(), true},
		{DemoOptions{Rounds: 288, Days: 1}, true},
		{DemoOptions{Rounds: 1, Days: 1}, true},
		{DemoOptions{Rounds: 0, Days: 1}, false},
		{DemoOptions{Rounds: 25, Days: 1}, false},
		{DemoOptions{Rounds: 576, Days: 1}, false},
		{DemoOptions{Rounds: 24, Days: 0}, false},
	} {
		if err := tc.o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.o, err, tc.ok)
		}
	}
}
