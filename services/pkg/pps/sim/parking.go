package sim

import (
	"fmt"
	"math"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// The parking application (spec §4.4): 9 airport lots, each publishing its occupied count
// every 5 minutes, 288 values a day; the broker accumulates a day and computes.
const (
	ParkingLots    = 9
	ParkingSamples = 288 // 5-minute values per day
)

// ParkingCapacities are the lots' capacities: public, so the rank of free spaces is computed
// from occupied counts as capacity − occupied. They are scaled down from LAX's lots so the
// day's variance of the combined count (Σ(c−μ)² before the division) fits Q24.8 (D1).
var ParkingCapacities = [ParkingLots]int{84, 62, 45, 90, 38, 71, 55, 30, 66}

// ParkingTopic is the topic lot l (0-based) publishes its occupied count on.
func ParkingTopic(l int) string { return fmt.Sprintf("parking/lot%d/occupied", l+1) }

// Parking is one day of occupied counts: Occupied[l][t] for lot l at 5-minute slot t, an
// integer in [0, capacity]. Each lot follows an airport's daily shape — low overnight, a
// morning rise to a midday plateau, an evening decline — with its own base level, peak
// time and amplitude, plus noise that drifts from one slot to the next.
func Parking(seed uint64) *Dataset {
	r := rng(seed, "parking")
	ds := &Dataset{Name: "parking"}
	for l := range ParkingLots {
		cp := float64(ParkingCapacities[l])
		base := 0.25 + 0.15*r.Float64()      // overnight occupancy
		peak := 0.80 + 0.15*r.Float64()      // midday occupancy
		centre := 12.0 + 4*(r.Float64()-0.5) // hour of the peak
		width := 3.5 + 1.5*r.Float64()       // hours
		noise := 0.0
		values := make([]pps.Fixed, ParkingSamples)
		for t := range ParkingSamples {
			h := float64(t) / 12 // hours since midnight
			shape := math.Exp(-math.Pow((h-centre)/width, 2) / 2)
			noise = 0.8*noise + 0.03*r.NormFloat64()
			occ := math.Round(cp * (base + (peak-base)*shape + noise))
			values[t] = pps.FixedFromInt(int(min(max(occ, 0), cp)))
		}
		ds.Series = append(ds.Series, Series{Topic: ParkingTopic(l), Values: values})
	}
	return ds
}
