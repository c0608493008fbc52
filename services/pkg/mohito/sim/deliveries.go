package sim

import (
	"sync"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// Deliveries is the simulated devices' command executor: Ack answers each command with
// "ack:" and its payload, the response users, workloads and benches check, and counts how
// many times each payload reached a device, to check delivery exactly once. One Deliveries
// serves any number of devices; the zero value is ready and it is safe for concurrent use.
type Deliveries struct {
	mu sync.Mutex
	n  map[string]int
}

// Ack counts cmd's delivery and returns the response "ack:"+payload; it is a device handler
// (client.NewDevice).
func (d *Deliveries) Ack(cmd *mohito.Command) []byte {
	d.mu.Lock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[string(cmd.Payload)]++
	d.mu.Unlock()
	return append([]byte("ack:"), cmd.Payload...)
}

// Count is how many times payload has reached a device so far.
func (d *Deliveries) Count(payload string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[payload]
}

// Counts returns a copy of how many times each payload has reached a device so far.
func (d *Deliveries) Counts() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.n))
	for k, v := range d.n {
		out[k] = v
	}
	return out
}
