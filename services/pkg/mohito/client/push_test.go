package client_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roles"
	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestCommandsCostABoundedNumberOfCalls: through a whole deployment (real NATS accounts,
// redis-server, two gateway replicas), users whose responses and rounds are pushed make a
// bounded number of user-API calls per answered command, whatever the round period — a
// polling client makes one call per poll interval while it waits (the removed 25 ms poll cost
// ≈ 43 calls per command). Per command: one Submit and one Fetch, plus a few for commands
// that meet a closed round; Rounds streams are per connection and per 20 s, not per command.
func TestCommandsCostABoundedNumberOfCalls(t *testing.T) {
	pw := func(u string) string { return u + "-pw" }
	devices := []int{3, 4}
	n := testenv.StartNATS(t, testenv.WithNATSConfig(contract.AccountsConfig(sim.DeviceIDs(devices), pw)))
	rdb := testenv.StartRedis(t).Client()
	var planned, aborted atomic.Int64
	reg := prometheus.NewRegistry()
	c, err := sim.Start(t.Context(), sim.Config{
		// A long round: a poll would show up as many calls per command.
		Deployment:       sim.SmallDeployment(devices, 256, 500*time.Millisecond),
		DevicesPerVendor: devices,
		Users:            8,
		Gateways:         2,
		DecryptWorkers:   1,
		NATSURL:          n.URL(),
		Password:         pw,
		Store:            roundstate.NewRedis(rdb, 5*time.Minute),
		AckWait:          2 * time.Second,
		Registry:         reg,
		OnRound: func(r roles.RoundReport) {
			if r.Aborted {
				aborted.Add(1)
			} else {
				planned.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	stop := make(chan struct{})
	go func() {
		testenv.Eventually(t, 90*time.Second, "8 planned rounds", func() error {
			if planned.Load() < 8 {
				return errors.New("not yet")
			}
			return nil
		})
		close(stop)
	}()
	recs := sim.Workload{PayloadSize: 32}.Run(t.Context(), c, stop)
	if err := sim.Check(c, recs, 8); err != nil {
		t.Fatal(err)
	}
	if len(recs) < 8 || aborted.Load() != 0 {
		t.Fatalf("%d commands, %d aborted rounds", len(recs), aborted.Load())
	}
	calls := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mohito_gateway_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			calls[label(m, "method")+"/"+label(m, "code")] += m.GetCounter().GetValue()
		}
	}
	per := func(k string) float64 { return calls[k] / float64(len(recs)) }
	var lat time.Duration
	for _, r := range recs {
		lat += r.Result.Latency
	}
	t.Logf("%d commands (mean latency %v); calls: %v", len(recs), lat/time.Duration(len(recs)), calls)
	// Rounds are pushed: RoundInfo is asked only after a Submit met a round that had just
	// closed.
	if ri, fp := calls["RoundInfo/OK"], calls["Submit/FailedPrecondition"]; ri > fp {
		t.Errorf("%v RoundInfo calls for %v refused submissions; rounds should be pushed", ri, fp)
	}
	if f := per("Fetch/OK"); f != 1 {
		t.Errorf("%.2f answered Fetches per command; want exactly 1", f)
	}
	total := 0.0
	for k, v := range calls {
		if !strings.HasPrefix(k, "Rounds/") { // streams: per user session, not per command
			total += v
		}
	}
	if per := total / float64(len(recs)); per > 4 {
		t.Errorf("%.2f unary calls per command; want at most 4 (Submit + Fetch + retries)", per)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
