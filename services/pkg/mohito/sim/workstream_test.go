package sim_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRoundWorkPurgedWhenRoundEnds: the integrator's work stream (StreamWork, memory storage)
// and its inbox's round messages hold only the rounds in flight. Every round that ended — done
// with its commands answered, or aborted — has its plan, parts and layer shares purged, and the
// vendors' messages of that round too, and the stream keeps what no
// coordinator purged for WorkTTL, not natsx.DefaultMaxAge. With ten minutes of every round's
// decrypted commands kept, a 512-entry capacity class filled the cluster's 256 MB memory store
// and aborted every round after it (issue 14's ×1-after phase).
func TestRoundWorkPurgedWhenRoundEnds(t *testing.T) {
	var mu sync.Mutex
	ended := map[uint64]bool{} // rounds done or aborted
	withCommands := 0
	h := start(t, []int{3, 4}, 8, 1, func(c *sim.Config) {
		report := c.OnRound
		c.OnRound = func(r roles.RoundReport) {
			report(r)
			if r.Aborted {
				mu.Lock()
				ended[r.T] = true
				mu.Unlock()
			}
		}
		c.OnDone = func(t uint64, k int) {
			mu.Lock()
			ended[t] = true
			if k > 0 {
				withCommands++
			}
			mu.Unlock()
		}
	})
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		waitFor(t, 90*time.Second, "8 rounds done with commands", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return withCommands >= 8
		})
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), h.cluster, stop)
	if err := sim.Check(h.cluster, recs, 8); err != nil {
		t.Fatal(err)
	}

	js := h.nats.JetStream(t, nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, contract.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	dep := sim.SmallDeployment([]int{3, 4}, 256, 250*time.Millisecond)
	if got, want := s.CachedInfo().Config.MaxAge, dep.WorkTTL(); got != want {
		t.Fatalf("%s keeps messages %v, want WorkTTL %v", contract.StreamWork, got, want)
	}
	if s.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		t.Fatalf("%s on %v, want memory storage", contract.StreamWork, s.CachedInfo().Config.Storage)
	}
	in, err := js.Stream(ctx, contract.StreamIntegratorIn)
	if err != nil {
		t.Fatal(err)
	}
	var purged int
	testenv.Eventually(t, 30*time.Second, "every ended round's work and inbox messages purged", func() error {
		si, err := s.Info(ctx, jetstream.WithSubjectFilter(contract.WorkSubjects))
		if err != nil {
			return err
		}
		ii, err := in.Info(ctx, jetstream.WithSubjectFilter(contract.IntegratorRoundSubjects))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		var left []string
		for subj, n := range si.State.Subjects {
			if r := subjectRound(t, subj, 2); ended[r] {
				left = append(left, fmt.Sprintf("%s (%d)", subj, n))
			}
		}
		for subj, n := range ii.State.Subjects {
			if r := subjectRound(t, subj, 5); ended[r] {
				left = append(left, fmt.Sprintf("%s (%d)", subj, n))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d subjects of ended rounds still held: %s", len(left), strings.Join(left, ", "))
		}
		purged = len(ended)
		return nil
	})
	t.Logf("%d commands; %d ended rounds (%d with commands) left nothing in %s or %s", len(recs), purged, withCommands, contract.StreamWork, contract.StreamIntegratorIn)
}

// subjectRound is the round of a subject whose token i is the round: a work subject
// mohito.r.<t>.<kind>[.<v>] (i = 2) or an inbox subject mohito.i.in.<v>.r.<t>.<kind> (i = 5).
func subjectRound(t *testing.T, subj string, i int) uint64 {
	t.Helper()
	f := strings.Split(subj, ".")
	if len(f) <= i+1 || f[0] != "mohito" || f[i-1] != "r" {
		t.Fatalf("unexpected round subject %q", subj)
	}
	r, err := strconv.ParseUint(f[i], 10, 64)
	if err != nil {
		t.Fatalf("work subject %q: %v", subj, err)
	}
	return r
}
