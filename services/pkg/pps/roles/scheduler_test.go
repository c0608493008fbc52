package roles

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
