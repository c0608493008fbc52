package roles

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// Two broker replicas share the Redis lease: every tick of a pipeline is executed exactly
// once — one output per tick on PPS_OUT, one recorded execution per tick — while the leader
// runs and after it stops and the standby takes over. The pipeline's publishers never
// registered, so every execution is "insufficient" and needs no garbler.
func TestSchedulerLeaderElectionOneExecutionPerTick(t *testing.T) {
	e := startBrokerEnv(t, 2, nil)
	p := btPipeline("ns/sum", "sum", e.devices, nil, 0, 200*time.Millisecond, 200*time.Millisecond)
	registered := func(b *Broker) { b.current().fns[0].status = FunctionRegistered }
	opt := func(name string) BrokerOptions {
		return BrokerOptions{Garbler: unreachableGarbler(t), Pipelines: []contract.Pipeline{p}, Replica: name, LeaseTTL: 3 * time.Second}
	}
	a := e.startBroker(opt("a"), registered)
	b := e.startBroker(opt("b"), registered)
	obs := e.observer()
	outputs := func(n int) func() error {
		return func() error {
			ms, err := tryStreamMsgs(obs, contract.OutStream)
			if err != nil {
				return err
			}
			if len(ms) < n {
				return fmt.Errorf("%d outputs, want %d", len(ms), n)
			}
			return nil
		}
	}
	testenv.Eventually(t, 2*time.Minute, "outputs under the first leader", outputs(5))
	leader, standby := a, b
	if testutil.ToFloat64(b.m.Leader) == 1 {
		leader, standby = b, a
	}
	before := len(streamMsgs(t, obs, contract.OutStream))
	leader.stop()
	testenv.Eventually(t, 2*time.Minute, "outputs under the standby", outputs(before+5))
	standby.stop()

	msgs := streamMsgs(t, obs, contract.OutStream)
	ticks := map[uint64]bool{}
	execs := map[string]bool{}
	for _, m := range msgs {
		o, err := contract.DecodeOutput(m.Data)
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		if o.Status != contract.StatusInsufficient || o.Valid != 0 {
			t.Errorf("output %+v, want insufficient with no valid input", o)
		}
		if execs[o.Exec] {
			t.Errorf("execution %s published twice", o.Exec)
		}
		execs[o.Exec] = true
	}
	recs, err := a.Store().Executions(e.ctx(), a.current().fns[0].f.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if ticks[r.Tick] {
			t.Errorf("tick %d executed twice", r.Tick)
		}
		ticks[r.Tick] = true
		if !execs[r.Exec] {
			b, _ := json.Marshal(r)
			t.Errorf("execution %s has no output", b)
		}
	}
	if len(recs) != len(msgs) {
		t.Errorf("%d executions recorded, %d outputs published", len(recs), len(msgs))
	}
}

// Slot resolution (D9) at a tick: `val` takes the latest round received within the window
// before the tick, `window N` the N rounds ending there (lag k reads latest−k; a lag before
// round 0 is missing), `static` the latest round retained even if older than the window; a
// publisher whose policy does not allow the function is not allowed, one never registered is
// missing, and a round whose labels are not stored is missing.
func TestSchedulerResolvesSlots(t *testing.T) {
	devs := newBTDevices(t, 5)
	win, val, stat, barred, absent := devs[0], devs[1], devs[2], devs[3], devs[4]
	p := contract.Pipeline{Name: "ns/d9", Mode: contract.ModeFaithful,
		Source: `(begin (define w (window "w" 4)) (define s (static "s")) (define v (val "v")) (define b (val "b")) (define a (val "a"))
			(start-building) (sum (cons s (cons v (cons b (cons a w))))))`,
		Publishers: []contract.PipelinePublisher{{Topic: "w", DeviceID: win.id}, {Topic: "v", DeviceID: val.id},
			{Topic: "s", DeviceID: stat.id}, {Topic: "b", DeviceID: barred.id}, {Topic: "a", DeviceID: absent.id}},
		Window: contract.Duration{Duration: time.Minute}, Schedule: contract.Duration{Duration: time.Hour}}
	e := startBrokerEnv(t, 0, nil)
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t), Pipelines: []contract.Pipeline{p}}, nil)
	ctx := e.ctx()
	set := b.current()
	f := set.fns[0]
	at := time.Unix(1_800_000_000, 0)
	allow := contract.Policy{Fns: []string{f.f.ID}}
	for _, d := range []*btDevice{win, val, stat} {
		if err := b.Store().RegisterPublisher(ctx, d.id, allow); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Store().RegisterPublisher(ctx, barred.id, contract.Policy{Fns: []string{strings.Repeat("0", 32)}}); err != nil {
		t.Fatal(err)
	}
	var seed pps.Seed
	labels := pps.PublishLabels(&seed, []pps.Fixed{1})
	store := func(d *btDevice, round uint64, ago time.Duration) {
		if err := b.Store().StoreLabels(ctx, d.id, round, labels, at.Add(-ago)); err != nil {
			t.Fatal(err)
		}
	}
	// w: rounds 0..2 within the window (round 2 latest), so lag 3 is before round 0.
	store(win, 0, 50*time.Second)
	store(win, 1, 40*time.Second)
	store(win, 2, 30*time.Second)
	// v: round 5 inside the window, round 6 after the tick (not yet arrived at the tick).
	store(val, 4, 2*time.Minute)
	store(val, 5, 10*time.Second)
	store(val, 6, -10*time.Second)
	// s: only an old round, outside the window but retained.
	store(stat, 9, 30*time.Minute)
	store(barred, 1, 10*time.Second)

	slots, err := b.resolve(ctx, set, f, at)
	if err != nil {
		t.Fatal(err)
	}
	for s, spec := range f.f.Layout.Slots {
		got := slots[s]
		var wantRound uint64
		want := pps.Valid
		switch spec.Topic {
		case "w":
			if spec.Lag > 2 {
				want = pps.Missing
			} else {
				wantRound = 2 - uint64(spec.Lag)
			}
		case "v":
			wantRound = 5
		case "s":
			wantRound = 9
		case "b":
			want = pps.NotAllowed
		case "a":
			want = pps.Missing
		}
		if got.reason != want || (want == pps.Valid && (got.round != wantRound || len(got.labels) != pps.ValueBits)) {
			t.Errorf("slot %d (%s lag %d): %v round %d with %d labels, want %v round %d", s, spec.Topic, spec.Lag,
				got.reason, got.round, len(got.labels), want, wantRound)
		}
	}
	// Nothing within the window: the val slot is missing, the static one still resolves.
	late, err := b.resolve(ctx, set, f, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for s, spec := range f.f.Layout.Slots {
		if spec.Topic == "v" && late[s].reason != pps.Missing {
			t.Errorf("val slot an hour later: %v round %d, want missing", late[s].reason, late[s].round)
		}
		if spec.Topic == "s" && (late[s].reason != pps.Valid || late[s].round != 9) {
			t.Errorf("static slot an hour later: %v round %d, want round 9", late[s].reason, late[s].round)
		}
	}
}

// An execution's output is published with a message id per (function, tick): publishing it
// again, as a retry would, stores it once.
func TestSchedulerOutputRetryIsNotADuplicate(t *testing.T) {
	e := startBrokerEnv(t, 1, nil)
	b := e.startBroker(BrokerOptions{Garbler: unreachableGarbler(t),
		Pipelines: []contract.Pipeline{btPipeline("ns/sum", "sum", e.devices, nil, 0, time.Second, time.Hour)}}, nil)
	testenv.Eventually(t, time.Minute, "streams", func() error { return b.Checks()[2](e.ctx()) })
	f := b.current().fns[0]
	for _, exec := range []string{strings.Repeat("01", 16), strings.Repeat("02", 16), strings.Repeat("01", 16)} {
		o := &contract.Output{V: contract.Version, Fn: f.f.ID, Exec: exec, Status: contract.StatusInsufficient}
		if err := b.publishOutput(e.ctx(), f, 42, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.publishOutput(e.ctx(), f, 43, &contract.Output{V: contract.Version, Fn: f.f.ID, Exec: strings.Repeat("03", 16),
		Status: contract.StatusInsufficient}); err != nil {
		t.Fatal(err)
	}
	if n := len(streamMsgs(t, e.observer(), contract.OutStream)); n != 2 {
		t.Errorf("%d outputs stored for two ticks, want 2", n)
	}
}
