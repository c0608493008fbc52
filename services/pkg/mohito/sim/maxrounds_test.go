package sim_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
)

// TestMaxRoundsCountsTheSeries: max-rounds (the Round's spec.rounds) limits the series, not one
// coordinator process: the count lives in the status bucket, so a coordinator started after the
// series opened its rounds opens none (it used to count its own rounds and run them all again).
func TestMaxRoundsCountsTheSeries(t *testing.T) {
	const rounds = 3
	h := start(t, []int{2, 2}, 2, 1, func(c *sim.Config) { c.MaxRounds = rounds })
	waitFor(t, 90*time.Second, fmt.Sprintf("%d rounds planned or aborted", rounds), func() bool {
		return h.planned.Load()+h.aborted.Load() >= rounds
	})
	opened := func() contract.SeriesStatus { return seriesStatus(t, h) }
	before := opened()
	if before.OpenedRounds != rounds {
		t.Fatalf("the series opened %d rounds, max-rounds is %d", before.OpenedRounds, rounds)
	}
	// A new coordinator (a restart, or a new leader) finds the series done. An absence can only
	// be checked over a while: ten round periods, in which an unlimited coordinator opens rounds.
	h.cluster.StopRole("coordinator", 0)
	if err := h.cluster.StartRole(t.Context(), "coordinator", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * h.cluster.Deployment().Round)
	if after := opened(); after.OpenedRounds != rounds || after.CurrentRound != before.CurrentRound {
		t.Fatalf("after a coordinator restart the series opened %d rounds (current %d), before %d (current %d)",
			after.OpenedRounds, after.CurrentRound, before.OpenedRounds, before.CurrentRound)
	}
	if n := h.planned.Load() + h.aborted.Load(); n != rounds {
		t.Fatalf("%d rounds reported, max-rounds is %d", n, rounds)
	}
}

// seriesStatus reads the coordinator's status of the harness's series from the status bucket, as
// the operator does.
func seriesStatus(t *testing.T, h *harness) contract.SeriesStatus {
	t.Helper()
	nc, err := nats.Connect(h.nats.URL(), nats.UserInfo(contract.IntegratorUser, pw(contract.IntegratorUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), contract.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	series := h.cluster.Deployment().Series
	if series == "" {
		series = "default"
	}
	e, err := kv.Get(t.Context(), contract.StatusSeriesKey(series))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return contract.SeriesStatus{} // no round planned yet
	}
	if err != nil {
		t.Fatal(err)
	}
	var s contract.SeriesStatus
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}
