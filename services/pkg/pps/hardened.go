package pps

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/ot"
)

// Mode is how publishers' inputs reach the garbled circuit.
type Mode uint8

const (
	// Faithful is the paper's mode (§3.3–§3.5): publishers derive both labels of their input
	// wires from their round seed and send one per bit; identity gates and the consistency
	// check follow. A publisher colluding with the Broker can hand it both labels (§2.6.1).
	Faithful Mode = iota
	// Hardened is H1 (D21): the publisher sends y = x ⊕ m, and the Broker obtains the labels
	// of y's bits from the Garbler by OT extension, so no publisher ever knows a label.
	Hardened
)

func (m Mode) String() string {
	switch m {
	case Faithful:
		return "faithful"
	case Hardened:
		return "hardened"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// PayloadSize is the size of a publish payload of the given number of values: 32 labels
// per value in faithful mode, one masked 32-bit word in H1 (the 128× saving of D21).
func (m Mode) PayloadSize(values int) int {
	if m == Hardened {
		return values * MaskedValueSize
	}
	return values * ValueBits * LabelSize
}

// MaskedValueSize is the size of one H1 published value y = x ⊕ m, little-endian.
const MaskedValueSize = 4

// InputMask is H1's mask m of value index v of a message at round seed s_k (D21): the
// little-endian 32-bit word v of PRG(PRF(s_k, "pps/v1/h1-mask")). The PRF separates it from
// the faithful labels, which are PRG(s_k) itself (§8.2), so a seed used in both modes gives
// unrelated material.
func InputMask(seed *Seed, v int) uint32 {
	if v < 0 {
		panic(fmt.Sprintf("pps: negative value index %d", v))
	}
	k := PRF(seed, labelH1Mask)
	defer k.Zero()
	b := PRGBlock(&k, uint64(v)/4)
	defer clear(b[:])
	return binary.LittleEndian.Uint32(b[4*(v%4):])
}

// MaskValues is what an H1 publisher sends for the values xs at round seed s_k: y_v = x_v ⊕
// m_v, 4 bytes little-endian each. No label is derived on the device.
func MaskValues(seed *Seed, xs []Fixed) []byte {
	out := make([]byte, 0, MaskedValueSize*len(xs))
	for v, x := range xs {
		out = binary.LittleEndian.AppendUint32(out, uint32(x)^InputMask(seed, v))
	}
	return out
}

// SplitMasked cuts an H1 payload into its masked values, checking it holds exactly values
// of them (the Broker rejects a wrong length, as in §8.3).
func SplitMasked(payload []byte, values int) ([]uint32, error) {
	if values <= 0 || len(payload) != values*MaskedValueSize {
		return nil, fmt.Errorf("masked values: %d bytes for %d values, want %d: %w", len(payload), values, values*MaskedValueSize, ErrMalformed)
	}
	out := make([]uint32, values)
	for v := range out {
		out[v] = binary.LittleEndian.Uint32(payload[MaskedValueSize*v:])
	}
	return out, nil
}

// hardenedOTs is the OT count of an H1 execution: one per bit of every valid slot, in
// ascending slot order (OT i·32+j is bit j of the i-th valid slot). Both sides derive it
// from the Assignment, which the Broker sends with the garble request.
func hardenedOTs(a *Assignment) int { return a.ValidCount() * ValueBits }

// HardenedEvaluation is the Broker's side of one H1 execution between its OT request and the
// Garbler's reply.
type HardenedEvaluation struct {
	a     *Assignment
	batch *ot.ReceiverBatch
}

// HardenedRequest starts an H1 execution on the Broker (D21): the choice bits are the bits of
// y_s (masked(s), the value the slot's publisher sent) of every valid slot, and the returned
// request goes to the Garbler with the garble request. masked reports false for a slot it
// holds no value for; a valid slot without one is an error (it should have been nullified
// as Missing).
func HardenedRequest(a *Assignment, masked func(slot int) (uint32, bool), r *ot.Receiver) (*ot.ExtendRequest, *HardenedEvaluation, error) {
	n := hardenedOTs(a)
	choices := make([]byte, n/8)
	i := 0
	for s, reason := range a.reasons {
		if reason != Valid {
			continue
		}
		y, ok := masked(s)
		if !ok {
			return nil, nil, fmt.Errorf("hardened request: valid slot %d has no value", s)
		}
		binary.LittleEndian.PutUint32(choices[4*i:], y)
		i++
	}
	req, batch, err := r.Extend(choices, n)
	clear(choices)
	if err != nil {
		return nil, nil, fmt.Errorf("hardened request: %w", err)
	}
	return req, &HardenedEvaluation{a: a, batch: batch}, nil
}

// EvaluatorLabels turns the Garbler's correlated-OT reply into the labels for gc.Evaluate:
// the label of y_s[j] for every bit of a valid slot, which the Garbler's swap makes the
// label of x_s[j]; wires the Garbler hard-wires are left zero (the stream carries them,
// including slots it nullified itself).
func (h *HardenedEvaluation) EvaluatorLabels(reply *ot.CorrelatedReply) ([]gc.Label, error) {
	got, err := h.batch.Correlated(reply)
	if err != nil {
		return nil, fmt.Errorf("hardened evaluator labels: %w", err)
	}
	out := make([]gc.Label, h.a.layout.InputWires())
	i := 0
	for s, reason := range h.a.reasons {
		if reason != Valid {
			continue
		}
		for j := range ValueBits {
			out[s*ValueBits+j] = gc.Label(got[i*ValueBits+j])
		}
		i++
	}
	clear(got)
	return out, nil
}

// SlotMask gives the Garbler H1's mask m of a valid slot: InputMask of its publisher's
// round seed. An error wrapping ErrRoundErased nullifies the slot; any other aborts.
type SlotMask func(slot int) (uint32, error)

// HardenedGarbling is the Garbler's side of one H1 execution.
type HardenedGarbling struct {
	// Inputs are the per-wire inputs for gc.Garble.
	Inputs []gc.Input
	// Reply goes back to the Broker with the garbled stream.
	Reply *ot.CorrelatedReply
	// Assignment is the execution's final assignment: the Broker's, with Erased slots added.
	Assignment *Assignment
	// Erased lists the slots nullified here because their round seed was erased (spec §10
	// #8: ErrRoundErased surfaces as nullification); the Broker learns them from the
	// stream's constant wires too.
	Erased []uint32
}

// HardenedGarblerInputs is the Garbler's side of H1 (D21). It answers the Broker's OT
// request with correlated OT under a fresh Δ_OT (lsb 1), so the Broker receives, for bit j of
// a valid slot, K_{y_j} of the pair (K_0, K_1 = K_0 ⊕ Δ_OT), and it hard-wires the mask m by
// swapping the pair per bit of m: the label of x_j = 0 is K_{m_j}, since y_j = x_j ⊕ m_j.
// No publisher can compute any K, so a colluding publisher has no label to give the Broker.
// gc.Garble hides its Δ (D22), so the pairs enter through gc's identity gates (32 B per
// bit) rather than as circuit labels; they need no consistency check, since every y is a
// valid value. Nullified slots and validity bits are constants, as in faithful mode.
func HardenedGarblerInputs(a *Assignment, masks SlotMask, s *ot.Sender, req *ot.ExtendRequest) (*HardenedGarbling, error) {
	if req.Count != hardenedOTs(a) {
		return nil, fmt.Errorf("hardened garbler inputs: %d OTs for %d valid slots: %w", req.Count, a.ValidCount(), ErrMalformed)
	}
	batch, err := s.Extend(req)
	if err != nil {
		return nil, fmt.Errorf("hardened garbler inputs: %w", err)
	}
	var delta ot.Block
	rand.Read(delta[:])
	delta[0] |= 1
	defer clear(delta[:])
	k0, reply, err := batch.Correlated(delta)
	if err != nil {
		return nil, fmt.Errorf("hardened garbler inputs: %w", err)
	}
	defer clear(k0)

	final := &Assignment{layout: a.layout, reasons: append([]NullReason(nil), a.reasons...)}
	var erased []uint32
	in := make([]gc.Input, a.layout.InputWires())
	i := -1
	for s, reason := range a.reasons {
		if reason != Valid {
			continue
		}
		i++
		m, err := masks(s)
		if errors.Is(err, ErrRoundErased) {
			final.reasons[s] = Erased
			erased = append(erased, uint32(s))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hardened garbler inputs: mask of slot %d: %w", s, err)
		}
		for j := range ValueBits {
			K := k0[i*ValueBits+j]
			mj := byte(m >> j & 1)
			a0 := xorMasked(K, delta, mj) // K_{m_j}
			a1 := xorMasked(a0, delta, 1) // K_{1−m_j}
			in[s*ValueBits+j] = gc.Input{A0: gc.Label(a0), A1: gc.Label(a1)}
		}
		m = 0
	}
	for _, r := range final.reasons {
		if r == Valid {
			final.valid++
		}
	}
	if need := max(a.layout.MinInputs, 1); final.valid < need {
		clear(in)
		return nil, fmt.Errorf("%d valid inputs after erased rounds, function needs %d: %w", final.valid, need, ErrInsufficient)
	}
	for u := range in {
		if isConst, bit := final.ConstInput(u); isConst {
			in[u] = gc.Input{Const: true, Bit: bit}
		}
	}
	return &HardenedGarbling{Inputs: in, Reply: reply, Assignment: final, Erased: erased}, nil
}

// xorMasked returns x ⊕ bit·d without a branch on bit.
func xorMasked(x, d ot.Block, bit byte) ot.Block {
	m := -(bit & 1)
	for i := range x {
		x[i] ^= d[i] & m
	}
	return x
}
