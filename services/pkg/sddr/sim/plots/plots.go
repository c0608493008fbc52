// Package plots draws the simulator's figures (issue 18 item 2) as SVG with gonum/plot, from
// small sweeps of the simulator itself (the real protocol engine per device) next to the
// closed forms of the spec: battery use against the discovery interval and the neighbourhood
// size (Equation 1, spec §5.5), and recognition latency against the number of friends and
// the beacons the threshold needs (spec §7 item 12).
package plots

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/obscura-iot/obscura/services/pkg/sddr"
	"github.com/obscura-iot/obscura/services/pkg/sddr/contract"
	"github.com/obscura-iot/obscura/services/pkg/sddr/sim"
)

// Files are the plots Write produces.
var Files = []string{"battery-vs-neighbours.svg", "battery-vs-interval.svg", "latency-vs-friends.svg", "beacons-vs-listen-ids.svg"}

// Sweep sizes; Quick shrinks them for tests.
type Sweep struct {
	Neighbours []int
	Intervals  []time.Duration
	Friends    []int
	Duration   time.Duration
	// Energy is the coefficients of Equation 1 the sweeps and the closed form use (each
	// zero one the paper's): `sddr simulate --plots` draws with the run's.
	Energy contract.Energy
}

// Full is the sweep of `sddr simulate --plots`.
var Full = Sweep{
	Neighbours: []int{0, 1, 5, 10, 35, 100, 255},
	Intervals:  []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 300 * time.Second, 600 * time.Second},
	Friends:    []int{1, 5, 20, 64, 256},
	Duration:   time.Hour,
}

// Write runs the sweeps (seeded by seed) and writes Files into dir.
func Write(ctx context.Context, dir string, seed uint64, sw Sweep) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	model := sim.EnergyModel(sw.Energy)
	run := func(devices, group, friends int, interval, dur time.Duration) (*contract.Result, error) {
		return sim.RunLocal(ctx, sim.Config{
			RunID: "plots", Scenario: sim.ScenarioGroups, Devices: devices, GroupSize: group, Friends: friends,
			Duration: dur, Seed: seed, Interval: interval, Shards: 1, RevokeFraction: -1, Energy: sw.Energy,
		})
	}

	// Battery against neighbourhood size, two intervals.
	p := plot.New()
	p.Title.Text = "SDDR battery use against neighbourhood size"
	p.X.Label.Text = "devices in range d"
	p.Y.Label.Text = "battery % per day"
	var lines []any
	for _, iv := range []time.Duration{60 * time.Second, 120 * time.Second} {
		simPts, modelPts := plotter.XYs{}, plotter.XYs{}
		for _, d := range sw.Neighbours {
			r, err := run(max(d+1, 2), d+1, 1, iv, min(sw.Duration, 30*time.Minute))
			if err != nil {
				return err
			}
			// p_det = 0.95: a device hears 0.95·d of its d neighbours on average.
			simPts = append(simPts, plotter.XY{X: float64(d), Y: r.Classes[0].BatteryPercentPerDay})
			modelPts = append(modelPts, plotter.XY{X: float64(d), Y: model.BatteryPercentPerDay(d, iv)})
		}
		lines = append(lines, fmt.Sprintf("simulated, %v (p_det 0.95)", iv), simPts, fmt.Sprintf("Equation 1, %v", iv), modelPts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	if err := save(p, dir, Files[0]); err != nil {
		return err
	}

	// Battery against the discovery interval, 5 neighbours.
	p = plot.New()
	p.Title.Text = "SDDR battery use against discovery interval (5 devices in range)"
	p.X.Label.Text = "discovery interval (s)"
	p.Y.Label.Text = "battery % per day"
	simPts, modelPts := plotter.XYs{}, plotter.XYs{}
	for _, iv := range sw.Intervals {
		r, err := run(12, 6, 1, iv, max(sw.Duration, 3*iv))
		if err != nil {
			return err
		}
		simPts = append(simPts, plotter.XY{X: iv.Seconds(), Y: r.Classes[0].BatteryPercentPerDay})
		modelPts = append(modelPts, plotter.XY{X: iv.Seconds(), Y: model.BatteryPercentPerDay(5, iv)})
	}
	if err := plotutil.AddLinePoints(p, "simulated (p_det 0.95)", simPts, "Equation 1", modelPts); err != nil {
		return err
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	if err := save(p, dir, Files[1]); err != nil {
		return err
	}

	// Latency against friends (groups of 6, cliques of friends+1).
	p = plot.New()
	p.Title.Text = "SDDR recognition latency against number of friends"
	p.X.Label.Text = "friends (listen ids |LS|)"
	p.Y.Label.Text = "first beacon to Recognized (s), 60 s interval"
	lat, beacons := plotter.XYs{}, plotter.XYs{}
	for _, f := range sw.Friends {
		r, err := run(6*max(2, (f+1+5)/6), 6, f, 60*time.Second, sw.Duration)
		if err != nil {
			return err
		}
		if r.Recognitions == 0 {
			return fmt.Errorf("no recognitions with %d friends", f)
		}
		lat = append(lat, plotter.XY{X: float64(f), Y: float64(r.Latency.MillisSum) / float64(r.Recognitions) / 1000})
		var sum int64
		for n, c := range r.Latency.Beacons {
			sum += int64(n) * c
		}
		beacons = append(beacons, plotter.XY{X: float64(f), Y: float64(sum) / float64(r.Recognitions)})
	}
	if err := plotutil.AddLinePoints(p, "mean latency (simulated)", lat); err != nil {
		return err
	}
	if err := save(p, dir, Files[2]); err != nil {
		return err
	}

	// Beacons needed against listen ids: the threshold (closed form) and the simulated means.
	p = plot.New()
	p.Title.Text = "Beacons to recognition against listen ids"
	p.X.Label.Text = "listen ids |LS|"
	p.Y.Label.Text = "beacons of the friend's key"
	need := plotter.XYs{}
	pfp := sddr.BloomParams.FalsePositiveRate()
	for ls := 1.0; ls <= 1e5; ls *= 1.25 {
		tau := math.Min(1e-3, 0.05/ls)
		need = append(need, plotter.XY{X: ls, Y: math.Ceil(math.Log(tau) / math.Log(pfp))})
	}
	if err := plotutil.AddLinePoints(p, "threshold: least n with P_fp^n ≤ min(1e-3, 0.05/|LS|)", need, "simulated mean", beacons); err != nil {
		return err
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	return save(p, dir, Files[3])
}

func save(p *plot.Plot, dir, name string) error {
	return p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name))
}
