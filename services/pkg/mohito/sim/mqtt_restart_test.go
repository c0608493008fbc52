package sim_test

import (
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// TestMQTTDevicesExecuteCommandsAfterNATSRestarts (issues 14 and 20): every device of vendor 0
// is a real MQTT client; the NATS server restarts under load (the reloader's restart, a node
// killed or drained) and closes their connections. Each device reconnects, takes its
// subscription again and executes commands of the rounds after the restart — before, a device
// stayed deaf for the rest of the run: its vendor filled its slots with random values (O11),
// its users' responses did not open, and they retried until their deadline. Every command is
// still answered exactly once.
func TestMQTTDevicesExecuteCommandsAfterNATSRestarts(t *testing.T) {
	const mqttDevices = 3 // all of vendor 0's
	h := start(t, []int{mqttDevices, 4}, 8, 1, func(c *sim.Config) { c.MQTTDevices = mqttDevices })
	executed := func() []int {
		n := make([]int, mqttDevices)
		for d := range n {
			_, n[d] = h.cluster.Devices[0][d].Stats()
		}
		return n
	}
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		target := h.planned.Load() + 3
		waitFor(t, 60*time.Second, "first rounds", func() bool { return h.planned.Load() >= target })
		before := executed()
		if err := h.nats.Restart(); err != nil {
			t.Error(err)
			return
		}
		waitFor(t, 120*time.Second, "every MQTT device executes a command after the restart", func() bool {
			now := executed()
			for d := range now {
				if now[d] <= before[d] {
					return false
				}
			}
			return true
		})
		t.Logf("commands executed per MQTT device: %v before the restart, %v after", before, executed())
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), h.cluster, stop)
	if err := sim.Check(h.cluster, recs, 4); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commands answered exactly once across the restart", len(recs))
}
