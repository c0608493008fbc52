package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
	"github.com/obscura-iot/obscura/services/pkg/mohito/sim"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestRoundMetricsAtCoordinator (docs/metrics.md M-3, M-4, M-5, M-2): over a real deployment
// of 6 rounds with commands, the coordinator counts both outcomes of every round
// (mohito_rounds_total done + aborted = 6), observes mohito_round_duration_seconds once per
// completed round (its count equals the done rounds), exports T as mohito_round_period_seconds,
// counts mohito_burst_rounds_total once per planned round with S > 0 (as its reports say), and
// the decrypt workers, the encoders and the responder export their consumers' backlog
// (mohito_consumer_pending_messages).
func TestRoundMetricsAtCoordinator(t *testing.T) {
	const rounds = 6
	reg := prometheus.NewRegistry()
	devices := []int{2, 2}
	h := start(t, devices, 4, 1, func(c *sim.Config) {
		c.Registry = reg
		c.MaxRounds = rounds
	})
	m := h.cluster.Metrics
	done := func() float64 { return testutil.ToFloat64(m.Rounds.WithLabelValues("done")) }
	aborted := func() float64 { return testutil.ToFloat64(m.Rounds.WithLabelValues("aborted")) }
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		testenv.Eventually(t, 90*time.Second, fmt.Sprintf("%d rounds ended", rounds), func() error {
			if n := done() + aborted(); n < rounds {
				return fmt.Errorf("%v done, %v aborted", done(), aborted())
			}
			return nil
		})
	}()
	recs := sim.Workload{PayloadSize: 16}.Run(t.Context(), h.cluster, stop)
	<-stop
	if n := done() + aborted(); n != rounds {
		t.Fatalf("mohito_rounds_total: %v done + %v aborted, want %d rounds", done(), aborted(), rounds)
	}
	if done() == 0 {
		t.Fatalf("no round completed (%d commands)", len(recs))
	}
	count, sum := histogram(t, reg, "mohito_round_duration_seconds")
	if float64(count) != done() {
		t.Errorf("mohito_round_duration_seconds counted %d rounds, mohito_rounds_total{outcome=done} %v", count, done())
	}
	if sum <= 0 {
		t.Errorf("mohito_round_duration_seconds sum %v over %d rounds", sum, count)
	}
	if p, want := testutil.ToFloat64(m.RoundPeriod), h.cluster.Deployment().Round.Seconds(); p != want {
		t.Errorf("mohito_round_period_seconds = %v, want T = %v", p, want)
	}
	bursts := 0
	for _, r := range h.Reports() {
		if !r.Aborted && r.S > 0 {
			bursts++
		}
	}
	if b := testutil.ToFloat64(m.Bursts); b != float64(bursts) {
		t.Errorf("mohito_burst_rounds_total = %v, the coordinator planned %d rounds with a burst", b, bursts)
	}
	pending := gauges(t, reg, "mohito_consumer_pending_messages", "consumer")
	d := h.cluster.Deployment()
	for _, c := range []string{contract.ConsumerDecryptWorkers, contract.ConsumerResponder, contract.EncoderConsumer(0, d.Encoders)} {
		if _, ok := pending[c]; !ok {
			t.Errorf("mohito_consumer_pending_messages has no series for consumer %q (has %v)", c, pending)
		}
	}
	t.Logf("%d commands; %v rounds done, %v aborted, %d bursts; round time sum %.2fs", len(recs), done(), aborted(), bursts, sum)
}

// histogram returns the sample count and sum of the unlabelled histogram name in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// gauges returns the gauge family name in reg by the value of label.
func gauges(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
