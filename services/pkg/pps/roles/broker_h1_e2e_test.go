package roles

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
	"github.com/obscura-iot/obscura/services/testenv"
)

// The hardened input mode H1 (D21) through the services: publishers send y = x ⊕ m over
// MQTT, the broker gets y's labels from the real garbler by OT extension on its OTSetup
// session and evaluates; no consistency check runs.

// publishH1 publishes round's value x as an H1 publisher (masked only), or, with both, as a
// publisher feeding a faithful and a hardened pipeline (labels and masked values).
func (p *btPub) publishH1(t testing.TB, round uint64, x pps.Fixed, both bool) {
	t.Helper()
	seed, _ := p.seed(t, round)
	msg := &contract.Publish{V: contract.Version, Round: round, Masked: pps.MaskValues(&seed, []pps.Fixed{x})}
	if both {
		msg.Labels = pps.PublishLabels(&seed, []pps.Fixed{x})
	}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	mqttPublish(t, p.c, contract.Topic(contract.PubSubject(p.d.id)), b)
}

func startHardenedWorld(t *testing.T, n, minInputs int, body string) *btWorld {
	return startWorldWith(t, btWorldOpts{n: n, minInputs: minInputs, body: body, mode: contract.ModeHardened})
}

// Nine H1 publishers, two executions: the subscriber's output equals the plaintext model
// (mean, sum, max), the broker ran one OTSetup for both (one session, two batches), sent an
// OT request with every garble request and never a consistency check, and records and
// counts the executions as hardened ones.
func TestBrokerHardenedEndToEndOverMQTT(t *testing.T) {
	w := startHardenedWorld(t, 9, 0, btStats)
	for round := uint64(0); round < 2; round++ {
		xs := btValues(9)
		for i := range xs {
			xs[i] = xs[i].Add(pps.FixedFromInt(int(round)))
		}
		for i, p := range w.pubs {
			p.publishH1(t, round, xs[i], false)
		}
		o := w.runTick(t, float64(9*(round+1)))
		w.check(t, o, xs, nil)
		e := w.lastExecution(t, int(round)+1)
		if e.Status != contract.StatusOK || e.Mode != contract.ModeHardened || e.Check != 0 || e.ANDGates == 0 || e.Bytes == 0 || e.Round != o.Round {
			t.Errorf("execution record %+v", e)
		}
	}
	if n := len(w.requests(ppsv1.Garbler_CheckConsistency_FullMethodName)) + len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)) +
		len(w.requests(ppsv1.Garbler_SetupKKRT_FullMethodName)); n != 0 {
		t.Errorf("%d consistency-check calls in H1, want none", n)
	}
	if n := len(w.requests(ppsv1.Garbler_OTSetup_FullMethodName)); n != 1 || w.b.OTSetups() != 1 {
		t.Errorf("%d OTSetup calls (%d setups), want one session for both executions", n, w.b.OTSetups())
	}
	if v := testutil.ToFloat64(w.b.m.Executions.WithLabelValues("ns/stats", contract.StatusOK)); v != 2 {
		t.Errorf("%v ok executions counted, want 2", v)
	}
	if v := testutil.ToFloat64(w.g.garbler.m.ots); v != 2*9*32 {
		t.Errorf("garbler answered %v OTs, want %d", v, 2*9*32)
	}
	// What the broker keeps is the 4-byte masked value, never a label.
	ctx := context.Background()
	if l, _ := w.b.Store().Labels(ctx, w.pubs[0].d.id, 1); l != nil {
		t.Errorf("labels stored for a hardened-only publisher: %d bytes", len(l))
	}
	if m, err := w.b.Store().MaskedOf(ctx, []LabelRef{{Pub: w.pubs[0].d.id, Round: 1}}); err != nil || len(m[0]) != pps.MaskedValueSize {
		t.Errorf("masked value stored: %v %v", m, err)
	}
	// A hardened function has no consistency check on the garbler either.
	if _, err := w.g.client.CheckConsistency(ctx, &ppsv1.CheckConsistencyRequest{FnId: w.f.ID}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("consistency check of a hardened function: %v, want FAILED_PRECONDITION", err)
	}
}

// A mixed deployment: one faithful and one hardened pipeline over the same nine publishers,
// each publishing labels and masked values in one message. Both subscribers' outputs equal
// the model; only the faithful pipeline runs a consistency check.
func TestBrokerMixedFaithfulAndHardened(t *testing.T) {
	w := startWorldWith(t, btWorldOpts{n: 9, body: btStats, mode: contract.ModeFaithful, mixed: "sum"})
	if w.p2.Mode != contract.ModeHardened {
		t.Fatalf("second pipeline in mode %q", w.p2.Mode)
	}
	xs := btValues(9)
	for i, p := range w.pubs {
		p.publishH1(t, 0, xs[i], true)
	}
	o := w.runTick(t, 9)
	w.check(t, o, xs, nil)
	checkOutput(t, w.sub2, w.f2, w.sub2.next(t), xs, nil)
	if n := len(w.requests(ppsv1.Garbler_EvaluateKKRT_FullMethodName)) + len(w.requests(ppsv1.Garbler_CheckConsistency_FullMethodName)); n != 1 {
		t.Errorf("%d consistency checks, want one (the faithful pipeline's)", n)
	}
	if n := len(w.requests(ppsv1.Garbler_OTSetup_FullMethodName)); n != 1 {
		t.Errorf("%d OTSetup calls, want one", n)
	}
	// A publisher of both modes that sends labels only is rejected: the hardened pipeline
	// would have no value.
	seed, _ := w.pubs[0].seed(t, 1)
	w.pubs[0].publish(t, 1, pps.PublishLabels(&seed, xs[:1]))
	waitRejected(t, w.b, stagePublish, reasonPayloadMode, 1)
}

// Nullification in H1 (§10 #3): a publisher that sends nothing and one that sends labels
// instead of a masked value are missing; the output is the model over the other seven with
// the declared identities. With two publishers of min-inputs 3 the output is insufficient.
func TestBrokerHardenedNullification(t *testing.T) {
	w := startHardenedWorld(t, 9, 3, btStats)
	xs := btValues(9)
	for i, p := range w.pubs {
		switch i {
		case 0:
		case 1:
			seed, _ := p.seed(t, 0)
			p.publish(t, 0, pps.PublishLabels(&seed, xs[1:2]))
		default:
			p.publishH1(t, 0, xs[i], false)
		}
	}
	waitRejected(t, w.b, stagePublish, reasonPayloadMode, 1)
	o := w.runTick(t, 7)
	w.check(t, o, xs, map[int]pps.NullReason{0: pps.Missing, 1: pps.Missing})
	if e := w.lastExecution(t, 1); !slices.Equal(e.Nullified["missing"], []uint32{0, 1}) || len(e.Nullified) != 1 {
		t.Errorf("nullified %v, want missing [0 1]", e.Nullified)
	}
	for _, i := range []int{7, 8} {
		w.pubs[i].publishH1(t, 1, xs[i], false)
	}
	o = w.runTick(t, 9)
	if o.Status != contract.StatusInsufficient || o.Valid != 2 || len(o.Masked) != 0 {
		t.Errorf("output %+v, want insufficient with 2 valid", o)
	}
}

// A garbler restart between two executions loses the OT session (it lives in memory only):
// the next garble request is ABORTED, the broker runs OTSetup again and the execution
// succeeds.
func TestBrokerHardenedGarblerRestartRerunsOTSetup(t *testing.T) {
	w := startHardenedWorld(t, 9, 0, "sum")
	xs := btValues(9)
	for i, p := range w.pubs {
		p.publishH1(t, 0, xs[i], false)
	}
	w.check(t, w.runTick(t, 9), xs, nil)
	if w.b.OTSetups() != 1 {
		t.Fatalf("%d OT setups, want 1", w.b.OTSetups())
	}
	g := w.restartGarbler(t)
	for i, p := range w.pubs {
		p.publishH1(t, 1, xs[i], false)
	}
	w.check(t, w.runTick(t, 18), xs, nil)
	if w.b.OTSetups() != 2 || len(w.requests(ppsv1.Garbler_OTSetup_FullMethodName)) != 2 {
		t.Errorf("%d OT setups, want 2 (one after the restart)", w.b.OTSetups())
	}
	if v := testutil.ToFloat64(g.m.rejections.WithLabelValues("ot_session_unknown")); v != 1 {
		t.Errorf("restarted garbler refused %v unknown sessions, want 1", v)
	}
	if e := w.lastExecution(t, 2); e.Status != contract.StatusOK {
		t.Errorf("execution after the restart %+v", e)
	}
}

// restartGarbler stops the world's garbler and serves a new one (nothing in memory, the same
// Redis, sealer and identity) on the same address, then waits until the broker's
// connection reaches it.
func (w *btWorld) restartGarbler(t *testing.T) *Garbler {
	t.Helper()
	addr := w.g.addr
	w.g.stop()
	g, err := NewGarbler(GarblerOptions{Redis: w.g.redis.Client(), Sealer: w.g.sealer, Signer: w.g.signer, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := w.g.gCA.issue(t, "pps-garbler", true)
	cfg, err := ServerTLS(cert, key, w.g.brokerCA.file)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	testenv.Eventually(t, time.Minute, "listen on the old address", func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	g.Register(srv)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	w.g.garbler = g
	testenv.Eventually(t, time.Minute, "broker reaches the restarted garbler", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := w.b.opt.Garbler.Release(ctx, &ppsv1.ReleaseRequest{})
		return err
	})
	return g
}

// The broker's view in H1 (§10 #5, D21): over two executions, everything the broker
// received from the garbler, every Redis command and reply and every NATS message under
// pps.> never holds the label of the value a wire does not carry (the garbler's inputs are
// recorded to know both), nor a publisher's round seed, ratchet key, H1 mask key or mask
// block m, nor the function key, its round seed or the output mask r; its log holds none.
func TestBrokerHardenedViewNeverHoldsTheOtherLabelSeedsOrMasks(t *testing.T) {
	w := startHardenedWorld(t, 9, 0, btStats)
	var mu sync.Mutex
	var inputs [][]gc.Input
	w.g.garbler.inputsSeen = func(_ string, in []gc.Input) {
		mu.Lock()
		defer mu.Unlock()
		inputs = append(inputs, slices.Clone(in))
	}
	secrets := map[[32]byte]string{}
	blocks := map[[16]byte]string{}
	values := map[int][]pps.Fixed{}
	for round := uint64(0); round < 2; round++ {
		xs := btValues(9)
		for i := range xs {
			xs[i] = xs[i].Add(pps.FixedFromInt(3 * int(round)))
		}
		values[int(round)] = xs
		for i, p := range w.pubs {
			seed, key := p.seed(t, round)
			secrets[seed], secrets[key] = fmt.Sprintf("seed of publisher %d round %d", i, round), fmt.Sprintf("key of publisher %d round %d", i, round)
			mk := pps.PRF(&seed, "pps/v1/h1-mask")
			secrets[mk] = fmt.Sprintf("H1 mask key of publisher %d round %d", i, round)
			blocks[pps.PRGBlock(&mk, 0)] = fmt.Sprintf("H1 mask block of publisher %d round %d", i, round)
			p.publishH1(t, round, xs[i], false)
		}
		o := w.runTick(t, float64(9*(round+1)))
		w.check(t, o, xs, nil)
		seed, r := w.sub.maskOf(t, o.Round, o.Bits)
		secrets[seed] = fmt.Sprintf("function round seed %d", o.Round)
		for _, blob := range w.view.expand() {
			if indexOf(blob, r) >= 0 {
				t.Errorf("the broker's view holds r of round %d", o.Round)
			}
		}
	}
	secrets[w.sub.grant.Key] = "function key"
	mu.Lock()
	defer mu.Unlock()
	if len(inputs) != 2 {
		t.Fatalf("%d garblings seen, want 2", len(inputs))
	}
	// The label of ¬x_j of every input bit: the broker must never hold it.
	other := map[[16]byte]string{}
	wires := 0
	for ex, in := range inputs {
		for u, wire := range in {
			if wire.Const || u >= 9*pps.ValueBits {
				continue
			}
			x := uint32(values[ex][u/pps.ValueBits])
			bit := x >> (u % pps.ValueBits) & 1
			l := wire.A1
			if bit == 1 {
				l = wire.A0
			}
			other[[16]byte(l)] = fmt.Sprintf("label of the other value of bit %d of slot %d, execution %d", u%pps.ValueBits, u/pps.ValueBits, ex)
			wires++
		}
	}
	if wires != 2*9*pps.ValueBits {
		t.Fatalf("%d input wires recorded, want %d", wires, 2*9*pps.ValueBits)
	}
	blobs := append(w.view.expand(), []byte(w.b.log.String()))
	total := 0
	for _, blob := range blobs {
		total += len(blob)
		for i := 0; i+16 <= len(blob); i++ {
			b16 := [16]byte(blob[i : i+16])
			if what, ok := other[b16]; ok {
				t.Errorf("the broker's view holds the %s", what)
			}
			if what, ok := blocks[b16]; ok {
				t.Errorf("the broker's view holds the %s", what)
			}
			if i+32 <= len(blob) {
				if what, ok := secrets[[32]byte(blob[i:i+32])]; ok {
					t.Errorf("the broker's view holds the %s", what)
				}
			}
		}
	}
	t.Logf("searched %d blobs, %d bytes", len(blobs), total)
}
