package sim

import (
	"testing"
	"time"
)

// BenchmarkCity: one shard simulating a 2,000-device city for 24 h per iteration, reported as
// simulated device-hours per CPU-second (the process's CPU time) next to ns/op.
func BenchmarkCity(b *testing.B) {
	benchShards(b, 1)
}

// BenchmarkCityTwoShards: the same city as 2 in-process shards (goroutines over the Hub).
func BenchmarkCityTwoShards(b *testing.B) {
	benchShards(b, 2)
}

func benchShards(b *testing.B, shards int) {
	cfg := Config{RunID: "bench", Scenario: ScenarioCity, Devices: 2000, Duration: 24 * time.Hour, Seed: 1,
		Interval: time.Minute, Friends: 5, Shards: shards}
	var devh, cpu float64
	for b.Loop() {
		r, err := RunLocal(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		devh += r.DeviceHours
		cpu += r.CPUSeconds
	}
	b.ReportMetric(devh/cpu, "devh/cpu-s")
	b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
}
