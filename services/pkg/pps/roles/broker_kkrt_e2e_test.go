package roles

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The KKRT consistency check (D16b) through the services: by default the broker checks with
// one KKRT session per replica (SetupKKRT once, EvaluateKKRT per execution), never with the
// OPRF-PSI. With honest answers every slot is consistent and the output equals the model;
// then the garbler's answers turn inconsistent (the tags of six publishers' positions are
// replaced in transit by tags of other labels, as a garbler that derived other labels would
// send): exactly those six slots are nullified as inconsistent, three valid inputs are below
// min-inputs 5, the execution is refused as insufficient with nothing garbled, and the
// broker counts the six by reason.
func TestBrokerKKRTCheckHonestAndInconsistentGarbler(t *testing.T) {
	var lie atomic.Bool
	liars := 6
	w := startWorldWith(t, btWorldOpts{n: 9, minInputs: 5, body: btStats, tamper: func(method string, reply any) {
		if method != ppsv1.Garbler_EvaluateKKRT_FullMethodName || !lie.Load() {
			return
		}
		r := reply.(*ppsv1.EvaluateKKRTResponse)
		var resp pps.KKRTCheckResponse
		if err := resp.UnmarshalBinary(r.KkrtResponse); err != nil {
			t.Errorf("garbler's KKRT response: %v", err)
			return
		}
		// Positions are ascending, 32 per slot: the first six slots' tags.
		for i := range liars * pps.ValueBits {
			var x, y pps.KKRTTag
			rand.Read(x[:])
			rand.Read(y[:])
			if string(x[:]) > string(y[:]) {
				x, y = y, x
			}
			resp.Tags[i] = [2]pps.KKRTTag{x, y}
		}
		b, err := resp.MarshalBinary()
		if err != nil {
			t.Error(err)
			return
		}
		r.KkrtResponse = b
	}})
	xs := btValues(9)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		p.publish(t, 0, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	w.check(t, w.runTick(t, 9), xs, nil)
	e := w.lastExecution(t, 1)
	if e.Status != contract.StatusOK || e.Checker != contract.CheckKKRT || e.Check <= 0 || len(e.Nullified) != 0 {
		t.Errorf("honest execution %+v, want ok, checked by kkrt, nothing nullified", e)
	}
	if n := len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)); n != 1 {
		t.Errorf("%d KKRT checks, want 1", n)
	}
	if n := len(w.requests(ppsv1.Garbler_CheckConsistency_FullMethodName)); n != 0 {
		t.Errorf("%d OPRF-PSI checks by default, want 0", n)
	}
	if w.b.KKRTSetups() != 1 {
		t.Errorf("%d KKRT setups, want 1", w.b.KKRTSetups())
	}

	lie.Store(true)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 1)
		p.publish(t, 1, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	o := w.runTick(t, 18)
	if o.Status != contract.StatusInsufficient || o.Valid != 9-liars || len(o.Masked) != 0 {
		t.Errorf("output %+v, want insufficient with %d valid", o, 9-liars)
	}
	e = w.lastExecution(t, 2)
	if e.Status != contract.StatusInsufficient || e.Bytes != 0 || !slices.Equal(e.Nullified["inconsistent"], []uint32{0, 1, 2, 3, 4, 5}) {
		t.Errorf("execution %+v, want insufficient, nothing garbled, slots 0-5 inconsistent", e)
	}
	if v := testutil.ToFloat64(w.b.m.Nullified.WithLabelValues("ns/stats", pps.Inconsistent.String())); v != float64(liars) {
		t.Errorf("%v slots counted inconsistent, want %d", v, liars)
	}
	if v := testutil.ToFloat64(w.b.m.Executions.WithLabelValues("ns/stats", contract.StatusInsufficient)); v != 1 {
		t.Errorf("%v insufficient executions counted, want 1", v)
	}
	if w.b.KKRTSetups() != 1 {
		t.Errorf("%d KKRT setups after two checks, want 1 (one session)", w.b.KKRTSetups())
	}
}

// A KKRT session the garbler dropped on expiry (counted as expired, the session gauge back to
// zero) makes the broker's next check ABORTED; the broker sets up a new session and retries
// once, and the execution succeeds. A garbler restart (sessions are in memory only) is the
// same for the broker. (The TTL's timer itself is TestGarblerKKRTSessionExpires; here the
// session is expired by hand, so the test does not race a short TTL against a slow setup.)
func TestBrokerKKRTSessionExpiryAndRetry(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, body: btStats})
	xs := btValues(9)
	publish := func(round uint64) {
		for i, p := range w.pubs {
			seed, _ := p.seed(t, round)
			p.publish(t, round, pps.PublishLabels(&seed, xs[i:i+1]))
		}
	}
	publish(0)
	w.check(t, w.runTick(t, 9), xs, nil)
	g := w.g.garbler
	if v := testutil.ToFloat64(g.m.kkrtSessions); v != 1 {
		t.Errorf("garbler holds %v KKRT sessions, want 1", v)
	}
	g.kkrt.mu.Lock()
	held := slices.Collect(maps.Values(g.kkrt.byID))
	g.kkrt.mu.Unlock()
	for _, s := range held {
		g.kkrt.expire(s)
	}
	if v := testutil.ToFloat64(g.m.kkrtEnded.WithLabelValues("expired")); v != 1 || g.kkrt.len() != 0 || testutil.ToFloat64(g.m.kkrtSessions) != 0 {
		t.Fatalf("%v sessions expired, %d held", v, g.kkrt.len())
	}
	publish(1)
	w.check(t, w.runTick(t, 18), xs, nil)
	if w.b.KKRTSetups() != 2 || len(w.requests(ppsv1.Garbler_SetupKKRT_FullMethodName)) != 2 {
		t.Errorf("%d KKRT setups, want 2 (one after the expiry)", w.b.KKRTSetups())
	}
	if n := len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)); n != 3 {
		t.Errorf("%d KKRT checks sent, want 3 (one refused, retried once)", n)
	}
	if v := testutil.ToFloat64(g.m.rejections.WithLabelValues("kkrt_session_unknown")); v != 1 {
		t.Errorf("garbler refused %v unknown sessions, want 1", v)
	}
	if e := w.lastExecution(t, 2); e.Status != contract.StatusOK || e.Checker != contract.CheckKKRT {
		t.Errorf("execution after the expiry %+v", e)
	}

	g = w.restartGarbler(t)
	publish(2)
	w.check(t, w.runTick(t, 27), xs, nil)
	if w.b.KKRTSetups() != 3 {
		t.Errorf("%d KKRT setups, want 3 (one after the restart)", w.b.KKRTSetups())
	}
	if v := testutil.ToFloat64(g.m.rejections.WithLabelValues("kkrt_session_unknown")); v != 1 {
		t.Errorf("restarted garbler refused %v unknown sessions, want 1", v)
	}
}

// The OPRF-PSI check stays selectable: per pipeline (check "oprf" with the broker's default
// kkrt) and as the broker's default (a pipeline naming none). Either way the broker sends
// CheckConsistency and no KKRT message, the inconsistent labels are still found, and the
// execution records which check ran.
func TestBrokerOPRFCheckSelectable(t *testing.T) {
	for _, tc := range []struct{ name, check, pipelineCheck string }{
		{"pipeline", "", contract.CheckOPRF},
		{"broker default", contract.CheckOPRF, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorldWith(t, btWorldOpts{n: 4, body: "sum", check: tc.check, pipelineCheck: tc.pipelineCheck})
			xs := btValues(4)
			for i, p := range w.pubs {
				seed, _ := p.seed(t, 0)
				l := pps.PublishLabels(&seed, xs[i:i+1])
				if i == 2 {
					rand.Read(l[7*16 : 8*16])
				}
				p.publish(t, 0, l)
			}
			w.check(t, w.runTick(t, 4), xs, map[int]pps.NullReason{2: pps.Inconsistent})
			e := w.lastExecution(t, 1)
			if e.Checker != contract.CheckOPRF || !slices.Equal(e.Nullified["inconsistent"], []uint32{2}) {
				t.Errorf("execution %+v, want checked by oprf with slot 2 inconsistent", e)
			}
			if n := len(w.requests(ppsv1.Garbler_CheckConsistency_FullMethodName)); n != 1 {
				t.Errorf("%d OPRF-PSI checks, want 1", n)
			}
			if n := len(w.requests(ppsv1.Garbler_SetupKKRT_FullMethodName)) + len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)); n != 0 {
				t.Errorf("%d KKRT messages, want none", n)
			}
		})
	}
}

// The check's configuration is validated: an unknown broker default, an unknown pipeline
// check, and a check named for a hardened pipeline (H1 has none) are refused.
func TestBrokerCheckConfigValidated(t *testing.T) {
	devs := newBTDevices(t, 2)
	p := btPipeline("ns/v", "sum", devs, nil, 0, time.Hour, time.Hour)
	opt := BrokerOptions{NC: nil, Garbler: unreachableGarbler(t)}
	opt.Pipelines = []contract.Pipeline{p}
	opt.Check = "psi"
	if _, err := NewBroker(opt); err == nil || !strings.Contains(err.Error(), `consistency check "psi"`) {
		t.Errorf("broker check psi: %v", err)
	}
	for _, tc := range []struct{ mode, check, want string }{
		{contract.ModeFaithful, "psi", `check "psi"`},
		{contract.ModeHardened, contract.CheckKKRT, "hardened function has no consistency check"},
		{contract.ModeHardened, contract.CheckOPRF, "hardened function has no consistency check"},
	} {
		q := p
		q.Mode, q.Check = tc.mode, tc.check
		if err := q.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mode %s check %s: %v, want %q", tc.mode, tc.check, err, tc.want)
		}
	}
	for _, c := range []string{"", contract.CheckKKRT, contract.CheckOPRF} {
		q := p
		q.Check = c
		if err := q.Validate(); err != nil {
			t.Errorf("check %q: %v", c, err)
		}
	}
}

// The garbler's KKRT sessions: a malformed setup and a check of an unknown session are
// refused and counted by reason (INVALID_ARGUMENT, ABORTED); a session id is not taken
// twice; beyond the table's bound the least recently used session is evicted (counted) and
// its broker's next check is ABORTED; a hardened function has no check.
func TestGarblerKKRTSessions(t *testing.T) {
	e := newGarblerEnv(t)
	ctx := context.Background()
	c := e.client
	g := e.garbler
	f := e.register(t, "(begin (define xs (list (val \"a\") (val \"b\"))) (start-building) (sum xs))")

	if _, err := c.SetupKKRT(ctx, &ppsv1.SetupKKRTRequest{Setup: []byte("nope")}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed setup: %v, want INVALID_ARGUMENT", err)
	}
	if v := testutil.ToFloat64(g.m.rejections.WithLabelValues("malformed_kkrt")); v != 1 {
		t.Errorf("%v malformed_kkrt rejections, want 1", v)
	}

	g.kkrt.max = 2
	type session struct {
		r *ot.KKRTReceiver
		m *ot.KKRTSetup
	}
	setup := func() session {
		r, m, err := ot.NewKKRTReceiver(nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := m.MarshalBinary()
		resp, err := c.SetupKKRT(ctx, &ppsv1.SetupKKRTRequest{Setup: b})
		if err != nil {
			t.Fatal(err)
		}
		var reply ot.KKRTSetupReply
		if err := reply.UnmarshalBinary(resp.SetupReply); err != nil {
			t.Fatal(err)
		}
		if err := r.Finish(&reply); err != nil {
			t.Fatal(err)
		}
		return session{r, m}
	}
	check := func(s session) error {
		var label ot.Block
		rand.Read(label[:])
		oreq, batch, err := s.r.Encode([]ot.Block{label})
		if err != nil {
			t.Fatal(err)
		}
		defer batch.Erase()
		req := &pps.KKRTCheckRequest{Positions: []pps.Position{0}, OT: *oreq}
		b, err := req.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.EvaluateKKRT(ctx, &ppsv1.EvaluateKKRTRequest{FnId: f.ID, KkrtRequest: b})
		return err
	}
	s1 := setup()
	b1, _ := s1.m.MarshalBinary()
	if _, err := c.SetupKKRT(ctx, &ppsv1.SetupKKRTRequest{Setup: b1}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second setup of a session: %v, want ALREADY_EXISTS", err)
	}
	// Slot 0 has no publisher round: its position gets random tags, and the check is answered.
	if err := check(s1); err != nil {
		t.Errorf("check of a live session: %v", err)
	}
	s2 := setup()
	s3 := setup() // evicts s1, the least recently used
	if v := testutil.ToFloat64(g.m.kkrtEnded.WithLabelValues("evicted")); v != 1 || g.kkrt.len() != 2 {
		t.Errorf("%v evicted, %d held, want 1 and 2", v, g.kkrt.len())
	}
	if err := check(s1); status.Code(err) != codes.Aborted {
		t.Errorf("check of an evicted session: %v, want ABORTED", err)
	}
	if v := testutil.ToFloat64(g.m.rejections.WithLabelValues("kkrt_session_unknown")); v != 1 {
		t.Errorf("%v kkrt_session_unknown rejections, want 1", v)
	}
	for _, s := range []session{s2, s3} {
		if err := check(s); err != nil {
			t.Errorf("check of a live session: %v", err)
		}
	}
	if v := testutil.ToFloat64(g.m.kkrtPositions); v != 3 {
		t.Errorf("%v positions answered, want 3", v)
	}

	hsrc := "(begin (define xs (list (val \"c\") (val \"d\"))) (start-building) (sum xs))"
	h := gtCompile(t, hsrc)
	if _, err := c.RegisterFunction(ctx, &ppsv1.RegisterFunctionRequest{Source: hsrc, Mode: ppsv1.Mode_MODE_HARDENED}); err != nil {
		t.Fatal(err)
	}
	var label ot.Block
	oreq, batch, err := s2.r.Encode([]ot.Block{label})
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Erase()
	b, _ := (&pps.KKRTCheckRequest{Positions: []pps.Position{0}, OT: *oreq}).MarshalBinary()
	if _, err := c.EvaluateKKRT(ctx, &ppsv1.EvaluateKKRTRequest{FnId: h.ID, KkrtRequest: b}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("check of a hardened function: %v, want FAILED_PRECONDITION", err)
	}
}

// The gRPC limits of the garbler link admit the largest KKRT check pps encodes, with the
// slot list of every slot it can name, and its answer.
func TestGarblerMessageLimitsAdmitTheLargestKKRTCheck(t *testing.T) {
	if GarblerMaxRecvMsgSize() < pps.MaxKKRTRequestSize+slotListBound {
		t.Errorf("receive limit %d below the largest KKRT request %d and its slots %d", GarblerMaxRecvMsgSize(), pps.MaxKKRTRequestSize, slotListBound)
	}
	if GarblerMaxSendMsgSize() < pps.MaxKKRTResponseSize || GarblerMaxSendMsgSize() < pps.MaxPSIResponseSize {
		t.Errorf("send limit %d below the largest check response", GarblerMaxSendMsgSize())
	}
	// A SlotInput at its largest: slot, 64-hex publisher id, round and value at their maxima.
	in := &ppsv1.EvaluateKKRTRequest{FnId: "f"}
	id := make([]byte, 64)
	for i := range id {
		id[i] = 'a'
	}
	for s := range pps.MaxKKRTPositions / pps.ValueBits {
		in.Slots = append(in.Slots, &ppsv1.SlotInput{Slot: uint32(s) | 1<<31, PubId: string(id), Round: ^uint64(0), Value: ^uint32(0)})
	}
	if n := proto.Size(in); n > slotListBound+16 {
		t.Errorf("slot list of %d bytes, bound %d", n, slotListBound)
	}
}

// An execution in flight when the broker stops is cancelled, not waited for: here it stands
// in the consistency check (the garbler's answer never comes), the broker's Run returns, the
// execution is recorded as failed with its cancellation, and nothing is published.
func TestBrokerShutdownCancelsInFlightExecution(t *testing.T) {
	started := make(chan struct{}, 1)
	w := startWorldWith(t, btWorldOpts{n: 3, body: "sum", before: func(ctx context.Context, method string) {
		if method != ppsv1.Garbler_EvaluateKKRT_FullMethodName {
			return
		}
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
	}})
	xs := btValues(3)
	for i, p := range w.pubs {
		seed, _ := p.seed(t, 0)
		p.publish(t, 0, pps.PublishLabels(&seed, xs[i:i+1]))
	}
	testenv.Eventually(t, 2*time.Minute, "publishes stored and the scheduler waiting", func() error {
		if got := testutil.ToFloat64(w.b.m.Published); got != 3 {
			return fmt.Errorf("%v stored", got)
		}
		if w.clk.Waiting(w.tick) == 0 {
			return fmt.Errorf("no wait until %v", w.tick)
		}
		return nil
	})
	w.clk.Set(w.tick)
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("the execution never reached the consistency check")
	}
	stopped := make(chan struct{})
	go func() { w.b.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Minute):
		t.Fatal("the broker did not stop: its in-flight execution was not cancelled")
	}
	e := w.lastExecution(t, 1)
	if e.Status != contract.StatusFailed || !strings.HasPrefix(e.Error, "cancelled: broker stopping") {
		t.Errorf("execution %+v, want failed as cancelled", e)
	}
	if v := testutil.ToFloat64(w.b.m.Executions.WithLabelValues("ns/stats", contract.StatusFailed)); v != 1 {
		t.Errorf("%v failed executions counted, want 1", v)
	}
	if ms := streamMsgs(t, w.observer(), contract.OutStream); len(ms) != 0 {
		t.Errorf("%d outputs published by a cancelled execution", len(ms))
	}
}

// A KKRT session without a check for the garbler's --kkrt-session-ttl is dropped by its timer:
// counted as expired, the gauge back to zero, and a check of it is ABORTED.
func TestGarblerKKRTSessionExpires(t *testing.T) {
	e := newGarblerEnv(t, func(o *GarblerOptions) { o.KKRTSessionTTL = time.Second })
	g := e.garbler
	r, m, err := ot.NewKKRTReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.MarshalBinary()
	resp, err := e.client.SetupKKRT(context.Background(), &ppsv1.SetupKKRTRequest{Setup: b})
	if err != nil {
		t.Fatal(err)
	}
	var reply ot.KKRTSetupReply
	if err := reply.UnmarshalBinary(resp.SetupReply); err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(&reply); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the idle KKRT session expires", func() error {
		if v := testutil.ToFloat64(g.m.kkrtEnded.WithLabelValues("expired")); v != 1 {
			return fmt.Errorf("%v sessions expired", v)
		}
		if v := testutil.ToFloat64(g.m.kkrtSessions); v != 0 || g.kkrt.len() != 0 {
			return fmt.Errorf("%v sessions held after expiry (%d in the table)", v, g.kkrt.len())
		}
		return nil
	})
	f := e.register(t, "(begin (define xs (list (val \"a\") (val \"b\"))) (start-building) (sum xs))")
	oreq, batch, err := r.Encode([]ot.Block{{}})
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Erase()
	kb, _ := (&pps.KKRTCheckRequest{Positions: []pps.Position{0}, OT: *oreq}).MarshalBinary()
	if _, err := e.client.EvaluateKKRT(context.Background(), &ppsv1.EvaluateKKRTRequest{FnId: f.ID, KkrtRequest: kb}); status.Code(err) != codes.Aborted {
		t.Errorf("check of an expired session: %v, want ABORTED", err)
	}
}
