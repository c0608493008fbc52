package sim

import (
	"fmt"
	"math"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// The wireless application (spec §4.2): n nodes of a campus mesh each measure the received
// signal strength of its n−1 links; the log-distance path-loss model
// RSS = RSS(d0) − η·10·log10(d/d0) + X_σ is fitted by least squares over the n(n−1) links to
// find the propagation constant η.
const (
	// WirelessEta is the true propagation constant of the generated mesh.
	WirelessEta = 3.0
	// WirelessD0 is the reference distance d0, metres: about the mesh's typical link, so
	// the published distances centre on 0.
	WirelessD0 = 50.0
	// WirelessRSS0 is the true RSS at d0, dBm.
	WirelessRSS0 = -68.0
	// WirelessNominal is the link budget's nominal RSS, dBm: nodes publish RSS relative to it.
	WirelessNominal = -70.0
	// WirelessSigma is the shadowing's standard deviation, dB.
	WirelessSigma = 3.0
	// WirelessArea is the side of the square the nodes stand in, metres.
	WirelessArea = 120.0
)

// WirelessRSSTopic and WirelessDistanceTopic are node i's (1-based) topics, one link per
// round, peers in ascending order: y = (RSS − WirelessNominal)/10, in bels, and
// x = 10·log10(d/d0), in dB. The regression's slope is then −η/10 and its intercept
// (RSS(d0) − nominal)/10. These units keep the closed form's sums of 600 samples inside
// Q24.8 (n·Σxy, Σx²·Σy) while n·Σx² − (Σx)² stays far above its truncation error (D1): with
// log10(d) itself, 8 fractional bits cost η several per cent.
func WirelessRSSTopic(i int) string      { return fmt.Sprintf("mesh/node%d/rss", i) }
func WirelessDistanceTopic(i int) string { return fmt.Sprintf("mesh/node%d/logd", i) }

// WirelessEtaOf is η from a regression slope over the published units.
func WirelessEtaOf(slope float64) float64 { return -10 * slope }

// Mesh is a generated mesh: node positions and every directed link's distance and RSS.
type Mesh struct {
	Nodes int
	X, Y  []float64
	// Dist[i][j] and RSS[i][j] are for the link from node i to node j (0-based, i≠j).
	Dist, RSS [][]float64
}

// Wireless places n nodes at random (at least 2 m apart) and draws each link's RSS from the
// path-loss model with shadowing.
func Wireless(seed uint64, n int) *Mesh {
	r := rng(seed, "wireless")
	m := &Mesh{Nodes: n, X: make([]float64, n), Y: make([]float64, n), Dist: make([][]float64, n), RSS: make([][]float64, n)}
	for i := 0; i < n; {
		x, y := WirelessArea*r.Float64(), WirelessArea*r.Float64()
		ok := true
		for j := range i {
			if math.Hypot(x-m.X[j], y-m.Y[j]) < 2 {
				ok = false
			}
		}
		if ok {
			m.X[i], m.Y[i] = x, y
			i++
		}
	}
	for i := range n {
		m.Dist[i], m.RSS[i] = make([]float64, n), make([]float64, n)
		for j := range n {
			if i != j {
				d := math.Hypot(m.X[i]-m.X[j], m.Y[i]-m.Y[j])
				m.Dist[i][j] = d
				m.RSS[i][j] = round2(WirelessRSS0 - 10*WirelessEta*math.Log10(d/WirelessD0) + WirelessSigma*r.NormFloat64())
			}
		}
	}
	return m
}

// Dataset is the mesh as published: node i's RSS and distance topics, n−1 rounds each.
func (m *Mesh) Dataset() *Dataset {
	ds := &Dataset{Name: fmt.Sprintf("wireless-%d", m.Nodes)}
	for i := range m.Nodes {
		var rss, logd []pps.Fixed
		for j := range m.Nodes {
			if i != j {
				rss = append(rss, pps.FixedFromFloat((m.RSS[i][j]-WirelessNominal)/10))
				logd = append(logd, pps.FixedFromFloat(10*math.Log10(m.Dist[i][j]/WirelessD0)))
			}
		}
		ds.Series = append(ds.Series,
			Series{Topic: WirelessRSSTopic(i + 1), Values: rss},
			Series{Topic: WirelessDistanceTopic(i + 1), Values: logd})
	}
	return ds
}
