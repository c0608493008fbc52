package sim

import (
	"fmt"
	"math"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// The indoor application (spec §4.3): sensors of a lab (the Intel Berkeley Research Lab's
// 54 motes) report temperature (°C), relative humidity (%) and light (lux); the broker
// accumulates the streams and computes the squared correlation of a pair over n samples.

// Indoor quantities, the last level of their topics.
const (
	Temperature = "temperature"
	Humidity    = "humidity"
	Light       = "light"
)

// IndoorTopic is the topic mote m (1-based, as in the lab's data) publishes quantity on.
func IndoorTopic(mote int, quantity string) string {
	return fmt.Sprintf("lab/mote%d/%s", mote, quantity)
}

// Indoor is motes × samples readings of each quantity, one sample every 5 minutes from
// midnight. Temperature follows the building's daily cycle with a per-mote offset and
// noise; humidity falls as temperature rises (the lab's data correlate them negatively,
// r ≈ −0.8); light is near zero at night and follows the working day.
func Indoor(seed uint64, motes, samples int) *Dataset {
	r := rng(seed, "indoor")
	ds := &Dataset{Name: "indoor"}
	for m := 1; m <= motes; m++ {
		offset := 1.5 * r.NormFloat64()
		window := 0.6 + 0.8*r.Float64() // how much daylight reaches the mote
		temp, hum, light := make([]pps.Fixed, samples), make([]pps.Fixed, samples), make([]pps.Fixed, samples)
		for t := range samples {
			h := math.Mod(float64(t)/12, 24)
			day := math.Max(0, math.Sin(math.Pi*(h-7)/12)) // 7:00–19:00
			tc := 19 + offset + 4.5*day + 0.35*r.NormFloat64()
			temp[t] = pps.FixedFromFloat(round2(tc))
			hum[t] = pps.FixedFromFloat(round2(46 - 1.9*(tc-19-offset) + 1.2*r.NormFloat64()))
			light[t] = pps.FixedFromFloat(round2(math.Max(0, 5+480*window*day+25*r.NormFloat64())))
		}
		ds.Series = append(ds.Series,
			Series{Topic: IndoorTopic(m, Temperature), Values: temp},
			Series{Topic: IndoorTopic(m, Humidity), Values: hum},
			Series{Topic: IndoorTopic(m, Light), Values: light})
	}
	return ds
}

// round2 keeps the two decimals the lab's sensors report.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
