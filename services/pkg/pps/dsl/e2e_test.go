package dsl

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// latestRound is the round of every topic's latest value in the end-to-end runs.
const latestRound = 12

// publisher is one topic's publisher and the Garbler's copy of its ratchet.
type publisher struct {
	k0      pps.Seed
	garbler *pps.Ratchet
}

func (p *publisher) seedAt(t *testing.T, round uint64) pps.Seed {
	t.Helper()
	k := p.k0
	r := pps.NewRatchet(&k, 0, pps.RatchetOptions{})
	s, err := r.AdvanceTo(round)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// direct is a PSITransport calling the Garbler's RespondPSI in-process through the encoding.
type direct struct{ labels pps.LabelSource }

func (d direct) EvaluatePSI(_ context.Context, req *pps.PSIRequest) (*pps.PSIResponse, error) {
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	var got pps.PSIRequest
	if err := got.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	resp, err := pps.RespondPSI(&got, d.labels)
	if err != nil {
		return nil, err
	}
	if b, err = resp.MarshalBinary(); err != nil {
		return nil, err
	}
	var out pps.PSIResponse
	return &out, out.UnmarshalBinary(b)
}

type scenario struct {
	missing      []int // slots whose publisher sent nothing
	inconsistent []int // slots whose publisher sent a random label for one bit
}

// runPipeline is one execution of the whole protocol (spec §8.3–§8.8): publishers derive
// and send labels, Broker and Garbler run the consistency check, the Broker nullifies, the
// Garbler garbles with identity gates and the output mask of a fresh function round, the
// Broker evaluates, and a subscriber unmasks. It returns the subscriber's output and the
// model's output for the same (nullified) inputs.
func runPipeline(t *testing.T, f *Function, values []pps.Fixed, sc scenario) (got, want []byte) {
	t.Helper()
	ctx := context.Background()
	pubs := map[string]*publisher{}
	roundOf := func(s int) uint64 { return latestRound - uint64(f.Layout.Slots[s].Lag) }
	for _, s := range f.Layout.Slots {
		if pubs[s.Topic] == nil {
			p := &publisher{}
			rand.Read(p.k0[:])
			k := p.k0
			p.garbler = pps.NewRatchet(&k, 0, pps.RatchetOptions{Retain: 64})
			pubs[s.Topic] = p
		}
	}
	// Publish: each slot's publisher sends the labels of its value at its round.
	received := map[int][]pps.Label{}
	skip := map[int]bool{}
	for _, s := range sc.missing {
		skip[s] = true
	}
	for s, spec := range f.Layout.Slots {
		if skip[s] {
			continue
		}
		seed := pubs[spec.Topic].seedAt(t, roundOf(s))
		ls, err := pps.SplitPublished(pps.PublishLabels(&seed, values[s:s+1]), 1)
		if err != nil {
			t.Fatal(err)
		}
		received[s] = ls
	}
	for _, s := range sc.inconsistent {
		received[s][7] = pps.Label{0xba, 0xd}
	}
	// The Garbler regenerates labels from its ratchets (the publisher sends it nothing).
	slotLabels := func(s int) (*[pps.ValueBits]pps.LabelPair, error) {
		seed, err := pubs[f.Layout.Slots[s].Topic].garbler.AdvanceTo(roundOf(s))
		if err != nil {
			return nil, err
		}
		l := pps.ValueLabels(&seed, 0)
		return &l, nil
	}
	// Consistency check (Broker ↔ Garbler), then nullification (spec §8.8).
	var recv []pps.ReceivedLabel
	for s, ls := range received {
		for j, l := range ls {
			recv = append(recv, pps.ReceivedLabel{Pos: pps.PositionOf(s, j), Label: l})
		}
	}
	source := func(p pps.Position) (pps.LabelPair, error) {
		ls, err := slotLabels(p.Slot())
		if err != nil {
			return pps.LabelPair{}, err
		}
		return ls[p.Bit()], nil
	}
	var exec pps.ExecID
	rand.Read(exec[:])
	bad, err := (&pps.OPRFChecker{Garbler: direct{source}}).Check(ctx, exec, recv)
	if err != nil {
		t.Fatal(err)
	}
	nulls := map[int]pps.NullReason{}
	for _, s := range sc.missing {
		nulls[s] = pps.Missing
	}
	for _, s := range pps.BadSlots(bad) {
		nulls[int(s)] = pps.Inconsistent
	}
	if len(pps.BadSlots(bad)) != len(sc.inconsistent) {
		t.Fatalf("consistency check found slots %v, injected %v", pps.BadSlots(bad), sc.inconsistent)
	}
	a, err := pps.Nullify(&f.Layout, nulls)
	if err != nil {
		t.Fatal(err)
	}
	// Function keys: a subscriber registered before the execution.
	keys, err := pps.NewFunctionKeys(nil)
	if err != nil {
		t.Fatal(err)
	}
	var sessionKeys pps.SessionKeys
	rand.Read(sessionKeys.ServerToClient[:])
	sealed, err := keys.Subscribe("sub", &sessionKeys, []byte(f.ID))
	if err != nil {
		t.Fatal(err)
	}
	grant, err := pps.OpenGrant(&sessionKeys, sealed, []byte(f.ID))
	if err != nil {
		t.Fatal(err)
	}
	sub := pps.NewSubscription(4)
	if err := sub.Accept(&grant); err != nil {
		t.Fatal(err)
	}
	// Garble.
	plan, err := gc.Compile(f.Circuit)
	if err != nil {
		t.Fatal(err)
	}
	epoch, round, fseed := keys.AllocateRound()
	mask := pps.OutputMask(&fseed, f.OutputBits())
	inputs, err := pps.GarblerInputs(a, slotLabels)
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := gc.Garble(ctx, plan, &stream, inputs, mask, nil); err != nil {
		t.Fatal(err)
	}
	// Evaluate (Broker) and unmask (subscriber).
	labels, err := pps.EvaluatorLabels(a, func(s int) []pps.Label { return received[s] })
	if err != nil {
		t.Fatal(err)
	}
	res, err := gc.Evaluate(ctx, plan, &stream, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = sub.Unmask(epoch, round, res.Masked, f.OutputBits()); err != nil {
		t.Fatal(err)
	}
	xs, valid := a.ModelInputs(values)
	if want, err = f.Model(xs, valid); err != nil {
		t.Fatal(err)
	}
	return got, want
}

// TestEndToEndEqualsModel is spec §10 #1–#3 through the real garbling engine: for every
// block, with publishers missing and publishers sending inconsistent labels, the
// subscriber's unmasked output equals the plaintext model over the nullified inputs.
func TestEndToEndEqualsModel(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(7, 8))
	for _, block := range blocks {
		t.Run(block, func(t *testing.T) {
			f := mustCompile(t, blockSource(block, 6))
			n := len(f.Layout.Slots)
			for trial, sc := range []scenario{{}, {missing: []int{1}}, {inconsistent: []int{0, n - 1}}, {missing: []int{2}, inconsistent: []int{4}}} {
				values := make([]pps.Fixed, n)
				for s := range values {
					values[s] = pps.Fixed(rng.Uint32()) >> (8 + rng.IntN(16))
					if rng.IntN(2) == 0 {
						values[s] = -values[s]
					}
				}
				got, want := runPipeline(t, f, values, sc)
				if !bytes.Equal(got, want) {
					t.Fatalf("trial %d %+v: subscriber got %x, model %x", trial, sc, got, want)
				}
			}
		})
	}
}

func TestEndToEndListing(t *testing.T) {
	f := mustCompile(t, listing1+listing2)
	values := []pps.Fixed{pps.FixedFromFloat(21.5), pps.FixedFromFloat(-3.25), pps.FixedFromFloat(19), pps.FixedFromFloat(22), pps.FixedFromFloat(-3)}
	got, want := runPipeline(t, f, values, scenario{})
	if !bytes.Equal(got, want) || !bytes.Equal(got, pps.EncodeFixed([]pps.Fixed{pps.FixedFromFloat(-3.25)})) {
		t.Fatalf("min of the listing's temperatures: %x, model %x", got, want)
	}
}

func TestEndToEndBelowMinInputs(t *testing.T) {
	f := mustCompile(t, fmt.Sprintf("(begin (min-inputs 3) %s)", `(define w (window "x" 4)) (start-building) (mean w)`))
	_, err := pps.Nullify(&f.Layout, map[int]pps.NullReason{0: pps.Missing, 3: pps.Inconsistent})
	if !errors.Is(err, pps.ErrInsufficient) {
		t.Fatalf("2 of 4 valid with minInputs 3: %v, want ErrInsufficient (⊥, no garbling)", err)
	}
}
