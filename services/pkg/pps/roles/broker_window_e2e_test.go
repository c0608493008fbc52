package roles

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// waitWindowChecks waits until the broker has window-checked every stored publish and the
// window phase has counted want positions.
func (w *btWorld) waitWindowChecks(t *testing.T, stored, positions float64) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "window checks done", func() error {
		if got := testutil.ToFloat64(w.b.m.Published); got != stored {
			return fmt.Errorf("%v stored, want %v", got, stored)
		}
		if n := w.b.WindowChecksPending(); n != 0 {
			return fmt.Errorf("%d publishes not window-checked", n)
		}
		if got := testutil.ToFloat64(w.b.m.CheckPositions.WithLabelValues("ns/stats", "window")); got != positions {
			return fmt.Errorf("%v positions window-checked, want %v", got, positions)
		}
		return nil
	})
}

// With window checks on, the labels of each publish are checked with KKRT as they are
// stored, before the tick; the tick then checks nothing (no EvaluateKKRT after it, no tick
// positions), every slot counts as window-checked, nothing is nullified and the output equals
// the model. Twice, so the second day's rounds are checked in their own window.
func TestBrokerWindowCheckHonest(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, body: btStats, windowCheck: true})
	xs := btValues(9)
	for round := range uint64(2) {
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
		w.waitWindowChecks(t, float64(9*(round+1)), float64(9*pps.ValueBits*(round+1)))
		before := len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName))
		if before == 0 {
			t.Fatal("no KKRT check during the window")
		}
		w.check(t, w.runTick(t, float64(9*(round+1))), xs, nil)
		e := w.lastExecution(t, int(round)+1)
		if e.Status != contract.StatusOK || e.Checker != contract.CheckKKRT || e.WindowChecked != 9 || len(e.Nullified) != 0 {
			t.Errorf("day %d: execution %+v, want ok, 9 slots window-checked, nothing nullified", round, e)
		}
		if n := len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)); n != before {
			t.Errorf("day %d: %d KKRT checks at the tick, want 0", round, n-before)
		}
		if v := testutil.ToFloat64(w.b.m.CheckPositions.WithLabelValues("ns/stats", "tick")); v != 0 {
			t.Errorf("day %d: %v positions checked at the tick, want 0", round, v)
		}
	}
	if w.b.KKRTSetups() != 1 {
		t.Errorf("%d KKRT setups, want 1 (window and tick share the session)", w.b.KKRTSetups())
	}
}

// A label replaced in the broker's store after its value was found consistent in the window
// is not taken as checked: the tick compares what it evaluates with the copy that was
// checked, checks the differing slot (32 positions) with the garbler, finds it inconsistent,
// nullifies and counts it; the eight untouched slots stay window-checked and the output is
// the model's with that slot nullified. Without the comparison the substituted label would
// be evaluated unchecked.
func TestBrokerWindowCheckLabelSubstitutedAfterCheck(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, minInputs: 5, body: btStats, windowCheck: true})
	xs := btValues(9)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		p.publish(t, 0, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	w.waitWindowChecks(t, 9, 9*pps.ValueBits)

	// Slot 2's publisher (one slot per publisher, in order): flip one byte of bit 5's label.
	const victim, bit = 2, 5
	rdb := redis.NewClient(&redis.Options{Addr: w.redis.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	key := storeLabelKey(w.pubs[victim].d.id, 0)
	payload, err := rdb.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	payload[bit*pps.LabelSize] ^= 0x80
	if err := rdb.Set(ctx, key, payload, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}

	o := w.runTick(t, 9)
	w.check(t, o, xs, map[int]pps.NullReason{victim: pps.Inconsistent})
	e := w.lastExecution(t, 1)
	if e.Status != contract.StatusOK || e.WindowChecked != 8 || len(e.Nullified) != 1 || len(e.Nullified[pps.Inconsistent.String()]) != 1 ||
		e.Nullified[pps.Inconsistent.String()][0] != victim {
		t.Errorf("execution %+v, want ok, 8 slots window-checked, slot %d inconsistent", e, victim)
	}
	if v := testutil.ToFloat64(w.b.m.CheckPositions.WithLabelValues("ns/stats", "tick")); v != pps.ValueBits {
		t.Errorf("%v positions checked at the tick, want %d (the substituted slot's)", v, pps.ValueBits)
	}
	if v := testutil.ToFloat64(w.b.m.Nullified.WithLabelValues("ns/stats", pps.Inconsistent.String())); v != 1 {
		t.Errorf("%v slots counted inconsistent, want 1", v)
	}
}

// A label that is inconsistent when it arrives (the publisher sent a label of another
// value's wire) is found so in the window but not kept as checked; the tick checks it again,
// nullifies and counts it once.
func TestBrokerWindowCheckInconsistentOnArrival(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, minInputs: 5, body: btStats, windowCheck: true})
	xs := btValues(9)
	const victim = 7
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		labels := pps.PublishLabels(&seed, xs[i:i+1])
		if i == victim {
			labels[3*pps.LabelSize+1] ^= 1
		}
		p.publish(t, 0, labels)
	}
	w.waitWindowChecks(t, 9, 9*pps.ValueBits)
	o := w.runTick(t, 9)
	w.check(t, o, xs, map[int]pps.NullReason{victim: pps.Inconsistent})
	e := w.lastExecution(t, 1)
	if e.WindowChecked != 8 || len(e.Nullified[pps.Inconsistent.String()]) != 1 {
		t.Errorf("execution %+v, want 8 window-checked and slot %d inconsistent", e, victim)
	}
	if v := testutil.ToFloat64(w.b.m.Nullified.WithLabelValues("ns/stats", pps.Inconsistent.String())); v != 1 {
		t.Errorf("%v slots counted inconsistent, want 1", v)
	}
}

// Which pipelines a window check may run in the name of: registered faithful KKRT pipelines
// whose seed TTL (zero: the garbler's default) covers window + schedule. Hardened and OPRF
// pipelines, unregistered ones and a seed TTL shorter than the window (the garbler would
// erase an early round's seed before the tick) are left to the tick.
func TestWindowCheckFunctions(t *testing.T) {
	devs := newBTDevices(t, 2)
	pl := func(name string, mutate func(*contract.Pipeline)) contract.Pipeline {
		p := btPipeline(name, "sum", devs[:1], devs[1:], 0, time.Hour, time.Hour)
		mutate(&p)
		return p
	}
	cases := []struct {
		name   string
		mutate func(*contract.Pipeline)
		reg    bool
		want   bool
	}{
		{"kkrt, default seed TTL", func(*contract.Pipeline) {}, true, true},
		{"seed TTL covers window and schedule", func(p *contract.Pipeline) { p.SeedTTL.Duration = 2 * time.Hour }, true, true},
		{"seed TTL shorter than window and schedule", func(p *contract.Pipeline) { p.SeedTTL.Duration = 90 * time.Minute }, true, false},
		{"oprf", func(p *contract.Pipeline) { p.Check = contract.CheckOPRF }, true, false},
		{"hardened", func(p *contract.Pipeline) { p.Mode = contract.ModeHardened }, true, false},
		{"not registered", func(*contract.Pipeline) {}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := compileBrokerPipelines([]contract.Pipeline{pl("ns/p", c.mutate)})
			if err != nil {
				t.Fatal(err)
			}
			if c.reg {
				set.fns[0].status = FunctionRegistered
			}
			b := &Broker{opt: BrokerOptions{Check: contract.CheckKKRT}}
			got := b.windowCheckFns(set)[windowKey{pub: devs[0].id}] != nil
			if got != c.want {
				t.Errorf("window-checked %v, want %v", got, c.want)
			}
		})
	}
}
