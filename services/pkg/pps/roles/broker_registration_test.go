package roles

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// A subscriber removed from the pipeline is revoked (D14): the broker calls Garbler.Revoke,
// relays the new epoch's grant to the remaining subscriber only, drops the removed one from
// S_C and refuses its new subscription; the next output is masked under the new epoch, which
// the remaining subscriber unmasks to the model's answer and the removed one cannot open.
func TestBrokerRevokesRemovedSubscriber(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 3, subs: 2, body: "sum"})
	kept, removed := w.subs[0], w.subs[1]
	xs := btValues(3)
	publish := func(round uint64) {
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
	}
	publish(0)
	o := w.runTick(t, 3)
	w.check(t, o, xs, nil)
	if _, err := removed.sub.Unmask(o.Epoch, o.Round, removed.next(t).Masked, o.Bits); err != nil {
		t.Fatalf("second subscriber before its removal: %v", err)
	}

	p := w.p
	p.Subscribers = []string{kept.d.id}
	if err := w.b.SetPipelines([]contract.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	d := nextDown(t, kept.downs)
	if d.Ack == nil || d.Ack.Type != contract.TypeRegrant {
		t.Fatalf("remaining subscriber got %+v, want a regrant", d)
	}
	if err := d.Ack.Validate(kept.hello, w.g.signer.Public()); err != nil {
		t.Fatalf("regrant: %v", err)
	}
	g, err := pps.OpenGrant(&kept.keys, d.Ack.Grant, contract.GrantAD(w.f.ID, kept.hello.EdPK, kept.hello.Transcript()))
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.sub.Accept(&g); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "S_C without the removed subscriber", func() error {
		subs, err := w.b.Store().Subscribers(w.ctx(), w.f.ID)
		if err != nil || !slices.Equal(subs, []string{kept.d.id}) {
			return fmt.Errorf("S_C = %v, %v", subs, err)
		}
		return nil
	})
	select {
	case m := <-removed.downs:
		t.Errorf("the removed subscriber was sent %s", m)
	default:
	}
	if v := testutil.ToFloat64(w.b.m.Revoked); v != 1 {
		t.Errorf("%v revocations counted, want 1", v)
	}

	publish(1)
	o = w.runTick(t, 6)
	if o.Epoch != g.Epoch || o.Epoch == 0 {
		t.Fatalf("output of epoch %d, the new grant is epoch %d", o.Epoch, g.Epoch)
	}
	w.check(t, o, xs, nil)
	if _, err := removed.sub.Unmask(o.Epoch, o.Round, removed.next(t).Masked, o.Bits); !errors.Is(err, pps.ErrEpoch) {
		t.Errorf("removed subscriber unmasks the new epoch: %v, want ErrEpoch", err)
	}

	// Its new subscription is refused by the broker's ACL, not relayed.
	c := w.mqttClient(removed.d)
	downs := w.downs(c, removed.d)
	_, sub := btHello(removed.d, w.f.ID, nil)
	if n := refused2(t, c, contract.Topic(contract.DevUpSubject(removed.d.id)), sub, downs); n.Fn != w.f.ID {
		t.Errorf("refusal %+v", n)
	}
}

// A pipeline removed from the set loses its subscribers (D14): the broker revokes each with
// the garbler (a new key epoch, relayed to no one), drops them from S_C and forgets the
// function; when the pipeline comes back, its output is masked under an epoch the old
// subscriber does not hold, so it cannot unmask it.
func TestBrokerRevokesSubscribersOfRemovedPipeline(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 3, body: "sum"})
	xs := btValues(3)
	publish := func(round uint64) {
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
	}
	publish(0)
	o := w.runTick(t, 3)
	w.check(t, o, xs, nil)

	if err := w.b.SetPipelines(nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the removed pipeline's subscriber revoked", func() error {
		subs, err := w.b.Store().Subscribers(w.ctx(), w.f.ID)
		if err != nil || len(subs) != 0 {
			return fmt.Errorf("S_C = %v, %v", subs, err)
		}
		fns, err := w.b.Store().SubscribedFunctions(w.ctx())
		if err != nil || slices.Contains(fns, w.f.ID) {
			return fmt.Errorf("subscribed functions %v, %v", fns, err)
		}
		return nil
	})
	revokes := w.requests(ppsv1.Garbler_Revoke_FullMethodName)
	if len(revokes) != 1 || revokes[0].(*ppsv1.RevokeRequest).FnId != w.f.ID || revokes[0].(*ppsv1.RevokeRequest).DeviceId != w.sub.d.id {
		t.Errorf("revocations sent %v, want the one subscriber of the removed function", revokes)
	}
	if v := testutil.ToFloat64(w.b.m.Revoked); v != 1 {
		t.Errorf("%v revocations counted, want 1", v)
	}
	select {
	case m := <-w.sub.downs:
		t.Errorf("the revoked subscriber was sent %s", m)
	default:
	}

	if err := w.b.SetPipelines([]contract.Pipeline{w.p}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "function registered again", func() error {
		if _, st, reason, _ := w.b.FunctionStatus(w.p.Name); st != FunctionRegistered {
			return fmt.Errorf("status %s %s", st, reason)
		}
		return nil
	})
	publish(1)
	o = w.runTick(t, 6)
	if o.Status != contract.StatusOK || o.Epoch == 0 {
		t.Fatalf("output %+v, want ok under a new epoch", o)
	}
	if _, err := w.sub.sub.Unmask(o.Epoch, o.Round, o.Masked, o.Bits); !errors.Is(err, pps.ErrEpoch) {
		t.Errorf("the old subscriber unmasks the returned pipeline's output: %v, want ErrEpoch", err)
	}
}

// A function on which the broker and the garbler compile different circuits is refused —
// its status says why, the refusal is counted and logged, no tick runs it — and the broker
// keeps running. The garbler here is the real one; its RegisterFunction answer is altered in
// transit, as a garbler of another version would answer.
func TestBrokerRefusesFunctionWhoseCircuitDiffers(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 3, body: "sum", unregistered: true, tamper: func(method string, reply any) {
		if r, ok := reply.(*ppsv1.RegisterFunctionResponse); ok {
			r.CircuitHash[0] ^= 1
		}
	}})
	// The status the broker answers is set before the store, the metric and the log line are
	// written: wait for all of them.
	testenv.Eventually(t, 2*time.Minute, "function refused, recorded, counted and logged", func() error {
		if _, st, reason, _ := w.b.FunctionStatus(w.p.Name); st != FunctionRefused || !strings.Contains(reason, "circuit hash") {
			return fmt.Errorf("status %q %q", st, reason)
		}
		if st, reason, err := w.b.Store().FunctionStatus(w.ctx(), w.f.ID); err != nil || st != FunctionRefused || reason == "" {
			return fmt.Errorf("recorded status %q %q %v", st, reason, err)
		}
		if v := testutil.ToFloat64(w.b.m.Functions.WithLabelValues(w.p.Name, FunctionRefused)); v != 1 {
			return fmt.Errorf("function state metric %v", v)
		}
		if !strings.Contains(w.b.log.String(), "function refused") {
			return errors.New("the refusal is not logged")
		}
		return nil
	})
	if v := rejected(w.b, stageFunction, reasonHashMismatch); v < 1 {
		t.Errorf("%v circuit-hash refusals counted", v)
	}
	// The broker is up (readiness: every pipeline has the garbler's answer) and schedules
	// nothing for the refused function.
	testenv.Eventually(t, time.Minute, "ready", func() error {
		for _, ck := range w.b.Checks() {
			if err := ck(w.ctx()); err != nil {
				return err
			}
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "scheduler waiting for the tick", func() error {
		if w.clk.Waiting(w.tick) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	w.clk.Set(w.tick)
	// The scheduler claims a tick before it loops to the next one: once it waits for the
	// next tick, the refused function's tick has been passed over, unclaimed.
	testenv.Eventually(t, time.Minute, "scheduler past the tick", func() error {
		if w.clk.Waiting(w.tick.Add(w.period)) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if err := w.b.store.rdb.HGet(w.ctx(), storeFnKey(w.f.ID), "tick").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("a tick of the refused function was claimed: %v", err)
	}
	if recs, _ := w.b.Store().Executions(w.ctx(), w.f.ID); len(recs) != 0 {
		t.Errorf("a refused function ran: %+v", recs)
	}
}

// A round whose seed the garbler no longer holds (released, or past its TTL) surfaces as the
// nullification of that slot, reason "erased", never as a failed execution (§10 #8).
func TestBrokerErasedRoundIsNullified(t *testing.T) {
	w := startWorld(t, 4, 0, "sum")
	xs := btValues(4)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		p.publish(t, 0, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	// The garbler erases publisher 2's round 0 (as its seed TTL would).
	if _, err := w.g.client.Release(w.ctx(), &ppsv1.ReleaseRequest{Releases: []*ppsv1.ReleaseRequest_Release{
		{PubId: w.pubs[2].d.id, BeforeRound: 0}}}); err != nil {
		t.Fatal(err)
	}
	o := w.runTick(t, 4)
	w.check(t, o, xs, map[int]pps.NullReason{2: pps.Erased})
	e := w.lastExecution(t, 1)
	if e.Status != contract.StatusOK || !slices.Equal(e.Nullified[pps.Erased.String()], []uint32{2}) || len(e.Nullified) != 1 {
		t.Errorf("execution %+v, want ok with slot 2 erased", e)
	}
}
