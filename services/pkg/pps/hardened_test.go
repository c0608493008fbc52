package pps_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

// publishRound is the ratchet round of every publisher's value in these tests.
const publishRound = 9

// world is one function with its publishers, the Garbler's ratchets, an OT session between
// Broker and Garbler, and a subscriber.
type world struct {
	t        testing.TB
	f        *dsl.Function
	plan     *gc.Plan
	k0       []pps.Seed     // publisher ratchet keys, one per slot
	ratchets []*pps.Ratchet // the Garbler's copies
	sender   *ot.Sender
	receiver *ot.Receiver
	keys     *pps.FunctionKeys
	sub      *pps.Subscription
}

func newWorld(t testing.TB, src string) *world {
	t.Helper()
	f, err := dsl.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := gc.Compile(f.Circuit)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, f: f, plan: plan}
	for range f.Layout.Slots {
		var k pps.Seed
		rand.Read(k[:])
		w.k0 = append(w.k0, k)
		kc := k
		w.ratchets = append(w.ratchets, pps.NewRatchet(&kc, 0, pps.RatchetOptions{Retain: 16}))
	}
	// The one-time base OTs, through the wire encoding.
	r, setup, err := ot.NewReceiver(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, reply, err := ot.NewSender(nil, wire(t, setup))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(wire(t, reply)); err != nil {
		t.Fatal(err)
	}
	w.sender, w.receiver = s, r
	if w.keys, err = pps.NewFunctionKeys(nil); err != nil {
		t.Fatal(err)
	}
	var sk pps.SessionKeys
	rand.Read(sk.ServerToClient[:])
	sealed, err := w.keys.Subscribe("sub", &sk, []byte(f.ID))
	if err != nil {
		t.Fatal(err)
	}
	grant, err := pps.OpenGrant(&sk, sealed, []byte(f.ID))
	if err != nil {
		t.Fatal(err)
	}
	w.sub = pps.NewSubscription(4)
	if err := w.sub.Accept(&grant); err != nil {
		t.Fatal(err)
	}
	return w
}

// publisherSeed is the round seed a slot's publisher uses (its own ratchet).
func (w *world) publisherSeed(s int) pps.Seed {
	k := w.k0[s]
	r := pps.NewRatchet(&k, 0, pps.RatchetOptions{})
	seed, err := r.AdvanceTo(publishRound)
	if err != nil {
		w.t.Fatal(err)
	}
	return seed
}

// garblerSeed is the Garbler's regeneration of a slot's round seed.
func (w *world) garblerSeed(s int) (pps.Seed, error) { return w.ratchets[s].AdvanceTo(publishRound) }

// wire sends a message through its encoding, as the services do over gRPC.
func wire[T any, PT interface {
	*T
	MarshalBinary() ([]byte, error)
	UnmarshalBinary([]byte) error
}](t testing.TB, m PT) PT {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := PT(new(T))
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return out
}

// hardenedRun is what one H1 execution leaves behind, for the tests to inspect.
type hardenedRun struct {
	stream   []byte     // the garbled stream the Broker received
	labels   []gc.Label // the Broker's evaluator labels (its whole label view)
	reply    *ot.CorrelatedReply
	garbling *pps.HardenedGarbling // the Garbler's inputs (both labels of every wire)
	masked   []byte                // o ⊕ r as evaluated
	epoch    uint64
	round    uint64
}

// runHardened is one H1 execution (spec D21): publishers mask their values, the Broker
// nullifies the missing ones and requests the OTs, the Garbler answers them and garbles with
// the output mask of a fresh function round, and the Broker evaluates. erased names slots
// whose seed the Garbler no longer holds.
func (w *world) runHardened(values []pps.Fixed, missing, erased []int) (*hardenedRun, error) {
	t := w.t
	ctx := context.Background()
	payloads := map[int]uint32{}
	isMissing := map[int]bool{}
	nulls := map[int]pps.NullReason{}
	for _, s := range missing {
		isMissing[s], nulls[s] = true, pps.Missing
	}
	for s := range w.f.Layout.Slots {
		if isMissing[s] {
			continue
		}
		seed := w.publisherSeed(s)
		ys, err := pps.SplitMasked(pps.MaskValues(&seed, values[s:s+1]), 1)
		if err != nil {
			t.Fatal(err)
		}
		payloads[s] = ys[0]
	}
	a, err := pps.Nullify(&w.f.Layout, nulls)
	if err != nil {
		return nil, err
	}
	// Broker: OT request.
	req, ev, err := pps.HardenedRequest(a, func(s int) (uint32, bool) { y, ok := payloads[s]; return y, ok }, w.receiver)
	if err != nil {
		t.Fatal(err)
	}
	// Garbler: answer, inputs, garble.
	isErased := map[int]bool{}
	for _, s := range erased {
		isErased[s] = true
	}
	masks := func(s int) (uint32, error) {
		if isErased[s] {
			return 0, fmt.Errorf("slot %d: %w", s, pps.ErrRoundErased)
		}
		seed, err := w.garblerSeed(s)
		if err != nil {
			return 0, err
		}
		return pps.InputMask(&seed, 0), nil
	}
	g, err := pps.HardenedGarblerInputs(a, masks, w.sender, wire(t, req))
	if err != nil {
		return nil, err
	}
	epoch, round, fseed := w.keys.AllocateRound()
	mask := pps.OutputMask(&fseed, w.f.OutputBits())
	var stream bytes.Buffer
	if _, err := gc.Garble(ctx, w.plan, &stream, g.Inputs, mask, nil); err != nil {
		t.Fatal(err)
	}
	// Broker: labels from the reply, evaluate.
	reply := wire(t, g.Reply)
	labels, err := ev.EvaluatorLabels(reply)
	if err != nil {
		t.Fatal(err)
	}
	run := &hardenedRun{stream: bytes.Clone(stream.Bytes()), labels: labels, reply: reply, garbling: g, epoch: epoch, round: round}
	res, err := gc.Evaluate(ctx, w.plan, &stream, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	run.masked = res.Masked
	return run, nil
}

// unmask is the subscriber's output.
func (w *world) unmask(r *hardenedRun) []byte {
	o, err := w.sub.Unmask(r.epoch, r.round, r.masked, w.f.OutputBits())
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

func randomValues(rng *mrand.Rand, n int) []pps.Fixed {
	vs := make([]pps.Fixed, n)
	for s := range vs {
		vs[s] = pps.Fixed(rng.Uint32()) >> (8 + rng.IntN(16))
		if rng.IntN(2) == 0 {
			vs[s] = -vs[s]
		}
	}
	return vs
}

// statsSource is sum and mean over n publishers, each on its own topic.
func statsSource(n int) string {
	var b strings.Builder
	b.WriteString("(begin (define xs (list")
	for i := range n {
		fmt.Fprintf(&b, " (val \"site/%d/temp\")", i)
	}
	b.WriteString(")) (start-building) (list (sum xs) (mean xs)))")
	return b.String()
}

func TestMaskValuesUnmaskWithInputMask(t *testing.T) {
	var seed pps.Seed
	rand.Read(seed[:])
	xs := []pps.Fixed{0, -1, pps.MaxFixed, pps.MinFixed, pps.FixedFromFloat(21.5)}
	ys, err := pps.SplitMasked(pps.MaskValues(&seed, xs), len(xs))
	if err != nil {
		t.Fatal(err)
	}
	masks := map[uint32]bool{}
	for v, x := range xs {
		m := pps.InputMask(&seed, v)
		if pps.Fixed(ys[v]^m) != x {
			t.Fatalf("value %d: y ⊕ m = %d, want %d", v, pps.Fixed(ys[v]^m), x)
		}
		masks[m] = true
	}
	if len(masks) != len(xs) {
		t.Fatal("two values of one message share a mask")
	}
	// The mask is not the faithful label stream's first word (the PRF separates them).
	first := pps.ValueLabels(&seed, 0)[0][0]
	if uint32(first[0])|uint32(first[1])<<8|uint32(first[2])<<16|uint32(first[3])<<24 == pps.InputMask(&seed, 0) {
		t.Fatal("H1 mask equals the faithful labels' first word")
	}
	if pps.Hardened.PayloadSize(3) != 12 || pps.Faithful.PayloadSize(3) != 3*32*16 {
		t.Fatal("payload sizes")
	}
}

func TestSplitMaskedRejectsWrongLength(t *testing.T) {
	for _, tc := range []struct{ n, values int }{{0, 1}, {3, 1}, {5, 1}, {8, 1}, {4, 0}} {
		if _, err := pps.SplitMasked(make([]byte, tc.n), tc.values); !errors.Is(err, pps.ErrMalformed) {
			t.Errorf("%d bytes for %d values: %v, want ErrMalformed", tc.n, tc.values, err)
		}
	}
}

// TestHardenedEndToEndEqualsModel: sum and mean of several publishers through H1 (masked
// publish, OT extension, garbling, evaluation, subscriber unmask) equal the plaintext model,
// with publishers missing at the Broker and rounds erased at the Garbler.
func TestHardenedEndToEndEqualsModel(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(11, 12))
	w := newWorld(t, statsSource(7))
	for trial, sc := range []struct{ missing, erased []int }{{}, {missing: []int{2}}, {erased: []int{0}}, {missing: []int{1, 6}, erased: []int{4}}} {
		values := randomValues(rng, 7)
		run, err := w.runHardened(values, sc.missing, sc.erased)
		if err != nil {
			t.Fatal(err)
		}
		if len(run.garbling.Erased) != len(sc.erased) {
			t.Fatalf("trial %d: erased %v, want %v", trial, run.garbling.Erased, sc.erased)
		}
		xs, valid := run.garbling.Assignment.ModelInputs(values)
		want, err := w.f.Model(xs, valid)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.unmask(run); !bytes.Equal(got, want) {
			t.Fatalf("trial %d %+v: subscriber got %x, model %x", trial, sc, got, want)
		}
	}
}

func TestHardenedErasedBelowMinInputsIsInsufficient(t *testing.T) {
	w := newWorld(t, "(begin (min-inputs 2) (define a (val \"a\")) (define b (val \"b\")) (start-building) (sum (list a b)))")
	_, err := w.runHardened([]pps.Fixed{1, 2}, nil, []int{1})
	if !errors.Is(err, pps.ErrInsufficient) {
		t.Fatalf("one of two valid after an erased round, minInputs 2: %v, want ErrInsufficient", err)
	}
	// The session stays in step: the next execution works.
	if _, err := w.runHardened([]pps.Fixed{1, 2}, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestHardenedGarblerRejectsRequestOfOtherShape(t *testing.T) {
	w := newWorld(t, statsSource(3))
	a, _ := pps.Nullify(&w.f.Layout, nil)
	fewer, _ := pps.Nullify(&w.f.Layout, map[int]pps.NullReason{0: pps.Missing})
	req, _, err := pps.HardenedRequest(fewer, func(int) (uint32, bool) { return 7, true }, w.receiver)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pps.HardenedGarblerInputs(a, func(int) (uint32, error) { return 0, nil }, w.sender, req); !errors.Is(err, pps.ErrMalformed) {
		t.Fatalf("request for 2 valid slots against an assignment of 3: %v, want ErrMalformed", err)
	}
	if _, _, err := pps.HardenedRequest(a, func(s int) (uint32, bool) { return 0, s != 1 }, w.receiver); err == nil {
		t.Fatal("a valid slot without a value was accepted")
	}
}
