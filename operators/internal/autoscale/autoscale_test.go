package autoscale

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func obs(mut func(*Observation)) Observation {
	o := Observation{Current: 2, Min: 1, Max: 8, TargetLag: 10_000, Period: 2 * time.Second,
		RoundDurations: []time.Duration{time.Second, time.Second, 1100 * time.Millisecond},
		LastChange:     t0.Add(-time.Hour), Now: t0}
	mut(&o)
	return o
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name   string
		o      Observation
		want   int32
		reason Reason
		says   string
	}{
		{"lag beyond target scales up", obs(func(o *Observation) { o.Lag = 42_000 }), 5, ScaleUp, "2→5 decrypt workers: lag 42000"},
		{"scale-up capped at max", obs(func(o *Observation) { o.Lag = 1_000_000 }), 8, ScaleUp, "2→8"},
		{"slow rounds scale up", obs(func(o *Observation) {
			o.RoundDurations = []time.Duration{1900 * time.Millisecond, 1950 * time.Millisecond, 2 * time.Second}
		}), 3, ScaleUp, "p90 work 2s of period 2s"},
		{"within tolerance holds", obs(func(o *Observation) { o.Lag = 15_000 }), 2, Steady, ""},
		{"idle scales down one step", obs(func(o *Observation) {
			o.Current = 6
			o.RoundDurations = []time.Duration{200 * time.Millisecond}
		}), 5, ScaleDown, "6→5"},
		{"scale-down waits for its cooldown", obs(func(o *Observation) {
			o.Current = 6
			o.RoundDurations = nil
			o.LastChange = t0.Add(-time.Minute)
		}), 6, Cooldown, "holding 6 for 2m0s"},
		{"scale-up waits for its shorter cooldown", obs(func(o *Observation) {
			o.Lag = 42_000
			o.LastChange = t0.Add(-5 * time.Second)
		}), 2, Cooldown, "want 5"},
		{"first decision needs no cooldown", obs(func(o *Observation) {
			o.Lag = 42_000
			o.LastChange = time.Time{}
		}), 5, ScaleUp, ""},
		{"never below min", obs(func(o *Observation) {
			o.Current, o.Min = 3, 3
			o.RoundDurations = nil
		}), 3, Steady, ""},
		{"count outside bounds is clamped at once", obs(func(o *Observation) {
			o.Current, o.Max = 12, 8
			o.LastChange = t0
		}), 8, Clamped, "12→8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.o, DefaultPolicy)
			if d.Replicas != tc.want || d.Reason != tc.reason {
				t.Fatalf("Decide = %d %s (%s), want %d %s", d.Replicas, d.Reason, d.Message, tc.want, tc.reason)
			}
			if !strings.Contains(d.Message, tc.says) {
				t.Errorf("message %q lacks %q", d.Message, tc.says)
			}
		})
	}
}

// TestNoOscillation feeds a noisy steady load for an hour of 10 s decisions: the count settles
// and changes rarely, and never outside [min, max].
func TestNoOscillation(t *testing.T) {
	o := obs(func(o *Observation) { o.Current = 4; o.LastChange = time.Time{} })
	changes := 0
	for i := range 360 {
		o.Now = t0.Add(time.Duration(i) * 10 * time.Second)
		noise := int64((i*7919)%5000) - 2500 // deterministic ±2.5k
		o.Lag = 30_000 + noise
		d := Decide(o, DefaultPolicy)
		if d.Replicas < o.Min || d.Replicas > o.Max {
			t.Fatalf("step %d: %d workers outside [%d, %d]", i, d.Replicas, o.Min, o.Max)
		}
		if d.Changed(o.Current) {
			changes++
			o.Current, o.LastChange = d.Replicas, o.Now
		}
	}
	if changes > 2 {
		t.Errorf("%d changes under a steady load of about 3 workers' lag; want it to settle", changes)
	}
	if o.Current != 3 && o.Current != 4 {
		t.Errorf("settled at %d workers, want 3 or 4 for 30k lag at 10k per worker", o.Current)
	}
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 6, 7, 8, 9}
	if q := quantile(ds, 0.9); q != 9 {
		t.Errorf("p90 = %d, want 9", q)
	}
	if q := quantile(nil, 0.9); q != 0 {
		t.Errorf("p90 of nothing = %d", q)
	}
}
