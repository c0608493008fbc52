package sim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

var compiled sync.Map // source → *dsl.Function: the large programs take seconds to compile

func compile(t testing.TB, src string) *dsl.Function {
	t.Helper()
	if f, ok := compiled.Load(src); ok {
		return f.(*dsl.Function)
	}
	f, err := dsl.Compile(src)
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, src)
	}
	compiled.Store(src, f)
	return f
}

func floats(xs []pps.Fixed) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x.Float64()
	}
	return out
}

// checkWithin compares a program's model result with the float64 statistic, output by
// output, within the program's declared Tolerance.
func checkWithin(t *testing.T, name, src string, got []pps.Fixed, want []float64) {
	t.Helper()
	tol := Tolerance[src]
	if len(got) != len(want) || len(tol) != len(want) {
		t.Fatalf("%s: %d outputs, %d expected, %d tolerances", name, len(got), len(want), len(tol))
	}
	for i := range want {
		if d := math.Abs(got[i].Float64() - want[i]); d > tol[i] {
			t.Errorf("%s output %d: model %v, float64 %v (|Δ| %v > declared %v)", name, i, got[i].Float64(), want[i], d, tol[i])
		}
	}
}

func TestProgramsCompileWithTheirDeclaredShape(t *testing.T) {
	for _, tc := range []struct {
		name, src      string
		slots, outputs int
	}{
		{"parking mean", ParkingMean, ParkingLots * ParkingSamples, 1},
		{"parking max/min", ParkingMaxMin, ParkingLots * ParkingSamples, 2},
		{"parking variance", ParkingVariance, ParkingLots * ParkingSamples, 1},
		{"parking rank free", ParkingRankFree, ParkingLots * ParkingSamples, 2},
		{"indoor correlation", IndoorCorrelation, 2 * IndoorSamples, 1},
		{"wireless regression", WirelessRegression, 2 * WirelessNodes * (WirelessNodes - 1), 2},
	} {
		f := compile(t, tc.src)
		if len(f.Layout.Slots) != tc.slots || len(f.Outputs) != tc.outputs {
			t.Errorf("%s: %d slots and %d outputs, want %d and %d", tc.name, len(f.Layout.Slots), len(f.Outputs), tc.slots, tc.outputs)
		}
		if _, ok := Tolerance[tc.src]; !ok {
			t.Errorf("%s declares no tolerance", tc.name)
		}
	}
	// The generators of sources give the constants for the constants' sizes.
	if compile(t, WirelessRegressionSource(WirelessNodes)).ID != compile(t, WirelessRegression).ID {
		t.Error("WirelessRegressionSource(5) is not WirelessRegression")
	}
	c := IndoorCorrelationSource(IndoorTopic(1, Temperature), IndoorTopic(1, Humidity), IndoorSamples)
	if compile(t, c).ID != compile(t, IndoorCorrelation).ID {
		t.Error("IndoorCorrelationSource(mote 1, 100) is not IndoorCorrelation")
	}
}

func TestGeneratorsAreDeterministic(t *testing.T) {
	gens := map[string]func(seed uint64) any{
		"parking":  func(s uint64) any { return Parking(s) },
		"indoor":   func(s uint64) any { return Indoor(s, 3, 50) },
		"wireless": func(s uint64) any { return Wireless(s, 6).Dataset() },
	}
	for name, g := range gens {
		if !reflect.DeepEqual(g(7), g(7)) {
			t.Errorf("%s: the same seed gave two datasets", name)
		}
		if reflect.DeepEqual(g(7), g(8)) {
			t.Errorf("%s: two seeds gave the same dataset", name)
		}
	}
}

// TestParkingHasTheDailyShape: 9 lots × 288 counts within capacity, fuller at midday than
// overnight.
func TestParkingHasTheDailyShape(t *testing.T) {
	ds := Parking(1)
	if len(ds.Series) != ParkingLots {
		t.Fatalf("%d lots", len(ds.Series))
	}
	for l, s := range ds.Series {
		if s.Topic != ParkingTopic(l) || len(s.Values) != ParkingSamples {
			t.Fatalf("lot %d: topic %s, %d values", l, s.Topic, len(s.Values))
		}
		var night, noon float64
		for t0, v := range s.Values {
			if v < 0 || v > pps.FixedFromInt(ParkingCapacities[l]) || v%pps.One != 0 {
				t.Fatalf("lot %d slot %d: %v is not a count within capacity", l, t0, v.Float64())
			}
			switch h := t0 / 12; {
			case h < 4:
				night += v.Float64()
			case h >= 11 && h < 15:
				noon += v.Float64()
			}
		}
		if noon <= night {
			t.Errorf("lot %d: %v cars around noon, %v overnight", l, noon, night)
		}
	}
}

// TestParkingProgramsEqualFloat64: the four parking statistics, model vs float64.
func TestParkingProgramsEqualFloat64(t *testing.T) {
	for seed := range uint64(2) {
		ds := Parking(seed)
		combined := make([]float64, ParkingSamples)
		free := make([]float64, ParkingLots)
		for l, s := range ds.Series {
			free[l] = float64(ParkingSamples * ParkingCapacities[l])
			for t0, v := range s.Values {
				combined[t0] += v.Float64()
				free[l] -= v.Float64()
			}
		}
		var sum, mx, mn = 0.0, math.Inf(-1), math.Inf(1)
		for _, c := range combined {
			sum, mx, mn = sum+c, math.Max(mx, c), math.Min(mn, c)
		}
		mean := sum / ParkingSamples
		var ss float64
		for _, c := range combined {
			ss += (c - mean) * (c - mean)
		}
		argmax, argmin := 0, 0
		for l := range free {
			if free[l] > free[argmax] {
				argmax = l
			}
			if free[l] < free[argmin] {
				argmin = l
			}
		}
		for _, tc := range []struct {
			name, src string
			want      []float64
		}{
			{"mean", ParkingMean, []float64{mean}},
			{"max/min", ParkingMaxMin, []float64{mx, mn}},
			{"variance", ParkingVariance, []float64{ss / ParkingSamples}},
			{"rank free", ParkingRankFree, []float64{float64(argmax), float64(argmin)}},
		} {
			got, err := ds.Evaluate(compile(t, tc.src))
			if err != nil {
				t.Fatal(err)
			}
			checkWithin(t, tc.name, tc.src, got, tc.want)
		}
	}
}

func pearson2(xs, ys []float64) float64 {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i]/n, my+ys[i]/n
	}
	var sxy, sxx, syy float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
		syy += (ys[i] - my) * (ys[i] - my)
	}
	return sxy * sxy / (sxx * syy)
}

// TestIndoorCorrelationEqualsFloat64: r² of mote 1's temperature and humidity, model vs
// float64; the generated data correlate as the lab's do.
func TestIndoorCorrelationEqualsFloat64(t *testing.T) {
	ds := Indoor(3, 4, 2*IndoorSamples)
	last := func(topic string) []float64 {
		v := ds.Topic(topic).Values
		return floats(v[len(v)-IndoorSamples:])
	}
	want := pearson2(last(IndoorTopic(1, Temperature)), last(IndoorTopic(1, Humidity)))
	got, err := ds.Evaluate(compile(t, IndoorCorrelation))
	if err != nil {
		t.Fatal(err)
	}
	checkWithin(t, "r²", IndoorCorrelation, got, []float64{want})
	if want < 0.5 {
		t.Errorf("temperature and humidity r² = %v; the lab's data correlate strongly", want)
	}
}

func ols(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	det := n*sxx - sx*sx
	return (n*sxy - sx*sy) / det, (sxx*sy - sx*sxy) / det
}

// TestWirelessRegressionFindsEta: over n-node meshes the model's regression equals float64
// OLS on the same samples within the declared tolerance, and the OLS slope recovers the
// generator's η within four standard errors of the shadowing noise.
func TestWirelessRegressionFindsEta(t *testing.T) {
	sizes := []int{WirelessNodes, 10, 25}
	if testing.Short() {
		sizes = sizes[:2]
	}
	for _, n := range sizes {
		m := Wireless(uint64(n), n)
		ds := m.Dataset()
		var xs, ys []float64
		for i := 1; i <= n; i++ {
			xs = append(xs, floats(ds.Topic(WirelessDistanceTopic(i)).Values)...)
			ys = append(ys, floats(ds.Topic(WirelessRSSTopic(i)).Values)...)
		}
		slope, icept := ols(xs, ys)
		src := WirelessRegressionSource(n)
		got, err := ds.Evaluate(compile(t, src))
		if err != nil {
			t.Fatal(err)
		}
		tol := Tolerance[WirelessRegression]
		for i, w := range []float64{slope, icept} {
			if d := math.Abs(got[i].Float64() - w); d > tol[i] {
				t.Errorf("%d nodes output %d: model %v, float64 %v (|Δ| %v > %v)", n, i, got[i].Float64(), w, d, tol[i])
			}
		}
		var mx, vx float64
		for _, x := range xs {
			mx += x / float64(len(xs))
		}
		for _, x := range xs {
			vx += (x - mx) * (x - mx)
		}
		// The slope's standard error is σ_y/√Σ(x−x̄)², σ_y the shadowing in bels.
		stderr := WirelessEtaOf(-WirelessSigma / 10 / math.Sqrt(vx))
		if d := math.Abs(WirelessEtaOf(slope) - WirelessEta); d > 4*stderr {
			t.Errorf("%d nodes: η = %v, generated with %v (|Δ| %v > 4σ = %v)", n, WirelessEtaOf(slope), WirelessEta, d, 4*stderr)
		}
		t.Logf("%d nodes: η model %.3f, OLS %.3f, true %v", n, WirelessEtaOf(got[0].Float64()), WirelessEtaOf(slope), WirelessEta)
	}
}

// TestPipelineWiresADatasetToAProgram: one publisher per topic the program reads, each with
// its series, a contract.Pipeline that validates, and the expected result.
func TestPipelineWiresADatasetToAProgram(t *testing.T) {
	ds := Wireless(4, WirelessNodes).Dataset()
	sub := contract.DeviceID(make([]byte, 32))
	p, err := NewPipeline(ds, WirelessRegression, PipelineOptions{Subscribers: []string{sub}, Rand: rand.NewChaCha8([32]byte{1})})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Publishers) != 2*WirelessNodes || len(p.Contract.Publishers) != 2*WirelessNodes {
		t.Fatalf("%d publishers, want one per topic (%d)", len(p.Publishers), 2*WirelessNodes)
	}
	ids := map[string]bool{}
	for i, pub := range p.Publishers {
		if p.Contract.Publishers[i].Topic != pub.Topic || p.Contract.Publishers[i].DeviceID != pub.ID() || ids[pub.ID()] {
			t.Fatalf("publisher %d: %+v vs %+v", i, p.Contract.Publishers[i], pub.Topic)
		}
		ids[pub.ID()] = true
		if !reflect.DeepEqual(pub.Values, ds.Topic(pub.Topic).Values) {
			t.Fatalf("publisher %d does not publish its topic's series", i)
		}
	}
	if p.Contract.Mode != contract.ModeFaithful || p.Contract.Source != p.Function.Source || p.Contract.Subscribers[0] != sub {
		t.Fatalf("contract %+v", p.Contract)
	}
	if err := p.Contract.Validate(); err != nil {
		t.Fatal(err)
	}
	want, _ := ds.Evaluate(p.Function)
	if !reflect.DeepEqual(p.Want, want) {
		t.Fatalf("Want %v, model %v", p.Want, want)
	}
	if _, err := NewPipeline(Parking(1), WirelessRegression, PipelineOptions{}); err == nil {
		t.Fatal("a program over topics the dataset lacks built a pipeline")
	}
}
