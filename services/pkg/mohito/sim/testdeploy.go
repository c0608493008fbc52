package sim

import (
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
)

// SmallDeployment is a fast deployment for tests and the demo: vendors with
// the given device counts, short rounds and small commands.
func SmallDeployment(devices []int, commandSize int, round time.Duration) roles.Deployment {
	n := len(devices)
	d := roles.Deployment{
		Params:          mohito.Params{Vendors: n, Q: 1, CommandSize: commandSize, ResponseSize: 128, Suite: mohito.SuiteX25519},
		Delta:           2,
		Quantum:         16,
		OutBatch:        32,
		Encoders:        2,
		Round:           round,
		ShufflerTimeout: 4 * round,
		// The vendors release their response tables this long after delivery, whatever the
		// devices did (G7): every command's latency includes it. Devices answer at a quarter.
		ResponseDeadline: time.Second,
	}
	if d.ShufflerTimeout < 2*time.Second {
		d.ShufflerTimeout = 2 * time.Second
	}
	for _, c := range devices {
		base := uint64(max(2, c/2))
		d.Policy = append(d.Policy, mohito.TargetPolicy{Base: base, Width: 2})
		d.Capacity = append(d.Capacity, int(base)+int(d.Delta)+2+8)
		d.Weights = append(d.Weights, c)
	}
	return d
}
