package pps_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// H1 against faithful mode in the same run (STYLE: a benchmark with a same-run baseline):
// one whole execution of sum and mean over n publishers, every role on one goroutine, every
// Broker↔Garbler message through its encoding. Faithful: publishers derive and send labels,
// OPRF-PSI consistency check, identity-gate garbling, evaluation. Hardened: publishers send
// masked words, OT extension, identity-gate garbling of the OT pairs, evaluation. The
// one-time base OTs of an H1 session (ot's BenchmarkBaseOTSetup) and the subscriber's
// unmasking are outside the loop. Reported: ns per input bit and per execution, the
// publisher's bytes per value and the Broker↔Garbler input-phase bytes per input bit.

var benchPublishers = []int{16, 64}

// pipe is an in-process PSI transport through the wire encoding.
type pipe struct {
	labels pps.LabelSource
	bytes  int
}

func (p *pipe) EvaluatePSI(_ context.Context, req *pps.PSIRequest) (*pps.PSIResponse, error) {
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	p.bytes += len(b)
	var got pps.PSIRequest
	if err := got.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	resp, err := pps.RespondPSI(&got, p.labels)
	if err != nil {
		return nil, err
	}
	if b, err = resp.MarshalBinary(); err != nil {
		return nil, err
	}
	p.bytes += len(b)
	var out pps.PSIResponse
	return &out, out.UnmarshalBinary(b)
}

func reportExecution(b *testing.B, inputBits, publishBytes, inputPhaseBytes int) {
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/float64(inputBits), "ns/input-bit")
	b.ReportMetric(float64(publishBytes), "B/value-published")
	b.ReportMetric(float64(inputPhaseBytes)/float64(inputBits), "B/input-bit-BG")
}

func benchValues(n int) []pps.Fixed { return randomValues(rand.New(rand.NewPCG(1, 2)), n) }

// BenchmarkExecutionFaithful has a variant without the consistency check ("no-psi"), as
// the paper's prototype measured it, so that the garbling paths compare alone too.
func BenchmarkExecutionFaithful(b *testing.B) {
	for _, n := range benchPublishers {
		for _, psi := range []bool{true, false} {
			name := fmt.Sprintf("publishers=%d/psi", n)
			if !psi {
				name = fmt.Sprintf("publishers=%d/no-psi", n)
			}
			b.Run(name, func(b *testing.B) { benchFaithful(b, n, psi) })
		}
	}
}

func benchFaithful(b *testing.B, n int, psi bool) {
	ctx := context.Background()
	w := newWorld(b, statsSource(n))
	values := benchValues(n)
	seeds := make([]pps.Seed, n)
	for s := range seeds {
		seeds[s] = w.publisherSeed(s)
	}
	slotLabels := func(s int) (*[pps.ValueBits]pps.LabelPair, error) {
		seed, err := w.garblerSeed(s)
		if err != nil {
			return nil, err
		}
		l := pps.ValueLabels(&seed, 0)
		return &l, nil
	}
	p := &pipe{labels: func(pos pps.Position) (pps.LabelPair, error) {
		ls, err := slotLabels(pos.Slot())
		if err != nil {
			return pps.LabelPair{}, err
		}
		return ls[pos.Bit()], nil
	}}
	checker := &pps.OPRFChecker{Garbler: p}
	var stream bytes.Buffer
	publish := 0
	for b.Loop() {
		p.bytes = 0
		received := map[int][]pps.Label{}
		var recv []pps.ReceivedLabel
		for s := range n {
			payload := pps.PublishLabels(&seeds[s], values[s:s+1])
			publish = len(payload)
			ls, err := pps.SplitPublished(payload, 1)
			if err != nil {
				b.Fatal(err)
			}
			received[s] = ls
			for j, l := range ls {
				recv = append(recv, pps.ReceivedLabel{Pos: pps.PositionOf(s, j), Label: l})
			}
		}
		if psi {
			bad, err := checker.Check(ctx, pps.ExecID{}, recv)
			if err != nil || len(bad) != 0 {
				b.Fatal(err, bad)
			}
		}
		a, err := pps.Nullify(&w.f.Layout, nil)
		if err != nil {
			b.Fatal(err)
		}
		inputs, err := pps.GarblerInputs(a, slotLabels)
		if err != nil {
			b.Fatal(err)
		}
		_, _, fseed := w.keys.AllocateRound()
		stream.Reset()
		if _, err := gc.Garble(ctx, w.plan, &stream, inputs, pps.OutputMask(&fseed, w.f.OutputBits()), nil); err != nil {
			b.Fatal(err)
		}
		labels, err := pps.EvaluatorLabels(a, func(s int) []pps.Label { return received[s] })
		if err != nil {
			b.Fatal(err)
		}
		if _, err := gc.Evaluate(ctx, w.plan, &stream, labels, nil); err != nil {
			b.Fatal(err)
		}
	}
	reportExecution(b, n*pps.ValueBits, publish, p.bytes)
}

func BenchmarkExecutionHardened(b *testing.B) {
	for _, n := range benchPublishers {
		b.Run(fmt.Sprintf("publishers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			w := newWorld(b, statsSource(n))
			values := benchValues(n)
			seeds := make([]pps.Seed, n)
			for s := range seeds {
				seeds[s] = w.publisherSeed(s)
			}
			masks := func(s int) (uint32, error) {
				seed, err := w.garblerSeed(s)
				if err != nil {
					return 0, err
				}
				return pps.InputMask(&seed, 0), nil
			}
			var stream bytes.Buffer
			publish, phase := 0, 0
			for b.Loop() {
				ys := map[int]uint32{}
				for s := range n {
					payload := pps.MaskValues(&seeds[s], values[s:s+1])
					publish = len(payload)
					y, err := pps.SplitMasked(payload, 1)
					if err != nil {
						b.Fatal(err)
					}
					ys[s] = y[0]
				}
				a, err := pps.Nullify(&w.f.Layout, nil)
				if err != nil {
					b.Fatal(err)
				}
				req, ev, err := pps.HardenedRequest(a, func(s int) (uint32, bool) { y, ok := ys[s]; return y, ok }, w.receiver)
				if err != nil {
					b.Fatal(err)
				}
				reqBytes, _ := req.MarshalBinary()
				g, err := pps.HardenedGarblerInputs(a, masks, w.sender, wire(b, req))
				if err != nil {
					b.Fatal(err)
				}
				_, _, fseed := w.keys.AllocateRound()
				stream.Reset()
				if _, err := gc.Garble(ctx, w.plan, &stream, g.Inputs, pps.OutputMask(&fseed, w.f.OutputBits()), nil); err != nil {
					b.Fatal(err)
				}
				replyBytes, _ := g.Reply.MarshalBinary()
				phase = len(reqBytes) + len(replyBytes)
				labels, err := ev.EvaluatorLabels(wire(b, g.Reply))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := gc.Evaluate(ctx, w.plan, &stream, labels, nil); err != nil {
					b.Fatal(err)
				}
			}
			reportExecution(b, n*pps.ValueBits, publish, phase)
		})
	}
}
