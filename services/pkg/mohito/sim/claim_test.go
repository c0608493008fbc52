package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// TestEncoderRetriesClaimLeftByStoppedEncoder: a claim on a command table left by an encoder
// that stopped before releasing it (its release did not reach the server) lapses after its TTL,
// and the owner encodes the table then — not after the records' redelivery, which here takes
// two minutes (the ack wait), far past the round's response phase. Claims for every vendor of
// three upcoming rounds are planted under another encoder's name; those rounds complete, and
// every command is answered exactly once.
func TestEncoderRetriesClaimLeftByStoppedEncoder(t *testing.T) {
	devices := []int{3, 4}
	h := start(t, devices, 4, 1, func(c *sim.Config) {
		c.AckWait = 2 * time.Minute
		// Room for the claim's 6 s TTL inside the response phase on a loaded machine.
		c.Deployment.ShufflerTimeout = 10 * time.Second
	})
	nc, err := nats.Connect(h.nats.URL(), nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	planted := map[uint64]bool{}
	go func() {
		defer close(stop)
		waitFor(t, 60*time.Second, "first rounds", func() bool { return h.planned.Load() >= 3 })
		claims, err := js.KeyValue(t.Context(), contract.BucketOKVSClaims)
		if err != nil {
			t.Error(err)
			return
		}
		var last uint64
		for _, r := range h.Reports() {
			last = max(last, r.T)
		}
		for tr := last + 3; tr < last+6; tr++ {
			planted[tr] = true
			for v := range devices {
				if _, err := claims.Create(t.Context(), fmt.Sprintf("%d-%d", tr, v), []byte("encoder-0-of-2-stopped")); err != nil {
					t.Error(err)
					return
				}
			}
		}
		waitFor(t, 2*time.Minute, "the planted rounds and three more", func() bool {
			done := 0
			for _, r := range h.Reports() {
				if r.T >= last+8 && !r.Aborted {
					done++
				}
			}
			return done > 0
		})
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), h.cluster, stop)
	if err := sim.Check(h.cluster, recs, 4); err != nil {
		t.Fatal(err)
	}
	aborted, planned := map[uint64]bool{}, map[uint64]bool{}
	for _, r := range h.Reports() {
		if !planted[r.T] {
			continue
		}
		if r.Aborted {
			aborted[r.T] = true
			t.Errorf("round %d, whose tables were claimed by a stopped encoder, aborted: %s", r.T, r.Reason)
		} else {
			planned[r.T] = true
		}
	}
	seen := 0
	for tr := range planned {
		if !aborted[tr] {
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no planted round completed")
	}
	t.Logf("%d commands; %d rounds with stale claims completed", len(recs), seen)
}
