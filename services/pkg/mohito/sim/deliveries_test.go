package sim

import (
	"maps"
	"sync"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// TestDeliveriesAckAnswersAndCountsEachDelivery: Ack answers "ack:"+payload and counts every
// delivery of a payload, from devices executing concurrently; Counts is a copy.
func TestDeliveriesAckAnswersAndCountsEachDelivery(t *testing.T) {
	var d Deliveries
	if got := d.Counts(); len(got) != 0 || got == nil {
		t.Fatalf("zero Deliveries: Counts() = %#v, want an empty map", got)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if got := string(d.Ack(&mohito.Command{Payload: []byte("p")})); got != "ack:p" {
				t.Errorf("Ack = %q, want ack:p", got)
			}
		})
	}
	wg.Wait()
	d.Ack(&mohito.Command{Payload: []byte("q")})
	counts := d.Counts()
	if want := map[string]int{"p": 3, "q": 1}; !maps.Equal(counts, want) {
		t.Fatalf("Counts() = %v, want %v", counts, want)
	}
	counts["p"] = 0
	if n := d.Count("p"); n != 3 {
		t.Errorf("Count(p) = %d after changing the copy, want 3", n)
	}
	if n := d.Count("never"); n != 0 {
		t.Errorf("Count(never) = %d, want 0", n)
	}
}
