package cluster

import (
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// plotScaling draws the load phases over time as one SVG of four aligned panels: offered load,
// the capacity class, the ready decryption workers and encoder partitions, and the round time
// with the work in it.
func plotScaling(path string, samples []ScaleSample) error {
	series := func(f func(ScaleSample) float64) plotter.XYs {
		xy := make(plotter.XYs, len(samples))
		for i, s := range samples {
			xy[i] = plotter.XY{X: s.At, Y: f(s)}
		}
		return xy
	}
	panel := func(title, ylabel string, lines ...any) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.X.Label.Text = "seconds"
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		return p, plotutil.AddLines(p, lines...)
	}
	var plots [][]*plot.Plot
	for _, mk := range []func() (*plot.Plot, error){
		func() (*plot.Plot, error) {
			return panel("Offered load", "users", "users (closed loop)", series(func(s ScaleSample) float64 { return float64(s.Users) }))
		},
		func() (*plot.Plot, error) {
			return panel("Capacity class", "% of base C_v", "class", series(func(s ScaleSample) float64 { return float64(s.Capacity) }))
		},
		func() (*plot.Plot, error) {
			return panel("Scaled stages", "replicas",
				"decryption workers (ready)", series(func(s ScaleSample) float64 { return float64(s.Workers) }),
				"encoder partitions", series(func(s ScaleSample) float64 { return float64(s.Encoders) }))
		},
		func() (*plot.Plot, error) {
			return panel("Round time", "seconds",
				"round (open to release)", series(func(s ScaleSample) float64 { return s.RoundSecs }),
				"work (close to release less the response deadline)", series(func(s ScaleSample) float64 { return s.WorkSecs }))
		},
	} {
		p, err := mk()
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	img := vgsvg.New(8*vg.Inch, 12*vg.Inch)
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadY: vg.Points(12)}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
