package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestCapacityFollowsDemand (issue 14 item 1): with capacity classes, a load whose rounds burst
// raises the series' class (its targets grow, the bursts stop being the rule), and once the load
// is gone, rounds of fakes only lower it again; every command is answered exactly once through
// the changes, and each change is in the status the operator reads, with its figures.
func TestCapacityFollowsDemand(t *testing.T) {
	const period = 250 * time.Millisecond
	h := start(t, []int{8}, 24, 1, func(c *sim.Config) {
		d := &c.Deployment
		// C = ⌈1 × class⌉ + δ 2 + U{0..2}: 3–5 at 100 %, 18–20 at 1600 %; K_v holds the largest.
		d.Policy = []mohito.TargetPolicy{{Base: 1, Width: 2}}
		d.Capacity = []int{24}
		d.Classes = &roles.CapacityClasses{Percent: []int{100, 400, 1600}, Hold: 10 * period, BurstRate: 0.2, LowerFakeRatio: 0.8}
	})
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		testenv.Eventually(t, 2*time.Minute, "the capacity class raised by the load's bursts", func() error {
			if s := seriesStatus(t, h); s.CapacityPercent < 400 || s.CapacityChange == nil {
				return fmt.Errorf("class %d%% (%d bursts in %d rounds)", s.CapacityPercent, s.Bursts, s.OpenedRounds)
			}
			return nil
		})
	}()
	recs := sim.Workload{PayloadSize: 16}.Run(t.Context(), h.cluster, stop)
	if err := sim.Check(h.cluster, recs, 24); err != nil {
		t.Fatal(err)
	}
	up := seriesStatus(t, h)
	if ch := up.CapacityChange; ch.ToPercent <= ch.FromPercent || ch.BurstRate <= 0.2 || ch.Rounds < 10 {
		t.Fatalf("the raise's figures: %+v (a raise needs more than 20%% bursts over a hold of 10 rounds)", ch)
	}
	if r := testutil.ToFloat64(h.cluster.Metrics.CapacityRatio); r != float64(up.CapacityPercent)/100 {
		t.Errorf("mohito_capacity_class_ratio %v, status %d%%", r, up.CapacityPercent)
	}
	// No load: every round is fakes only, none bursts, so the class comes down one step per hold.
	testenv.Eventually(t, 2*time.Minute, "the capacity class lowered without load", func() error {
		if s := seriesStatus(t, h); s.CapacityPercent != 100 {
			return fmt.Errorf("class %d%%", s.CapacityPercent)
		}
		return nil
	})
	down := seriesStatus(t, h).CapacityChange
	if r := testutil.ToFloat64(h.cluster.Metrics.CapacityRatio); r != 1 {
		t.Errorf("mohito_capacity_class_ratio %v after lowering to 100%%", r)
	}
	if down.ToPercent >= down.FromPercent || down.BurstRate != 0 || down.MinFakeRatio < 0.8 {
		t.Fatalf("the last lowering's figures: %+v", down)
	}
	t.Logf("%d commands; raised %d%%→%d%% after %d rounds (%.0f%% burst); lowered %d%%→%d%% (fakes ≥ %.0f%%)",
		len(recs), up.CapacityChange.FromPercent, up.CapacityChange.ToPercent, up.CapacityChange.Rounds, 100*up.CapacityChange.BurstRate,
		down.FromPercent, down.ToPercent, 100*down.MinFakeRatio)
}
