package pps

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"

	"github.com/obscura-iot/obscura/services/pkg/ot"
)

// The KKRT consistency check (D16b). Positions are public to both sides, so unlike the
// general PSI of the paper (PSZ14, KKRT16 with cuckoo hashing) nothing is hashed into bins:
// every position p gets its own instance F_p of the KKRT batched OPRF (package ot, kkrt.go).
// The Broker, OPRF receiver, learns F_p(x_p) for its received label x_p; the Garbler, OPRF
// sender, sends the truncated F_p(w0_p) and F_p(w1_p) in ascending order; the Broker's label
// is consistent iff its value is one of the two. Because the instance is per position, a
// valid label of another position, round or publisher is not in the set (F_p of it is
// pseudorandom), which is what the per-position masks r_p of Fig. 4 achieve for a PSI over
// one set; no s2 is needed.
//
// Leakage, as for OPRFChecker: the Garbler sees the positions (which it knows anyway) and
// OPRF rows that are uniformly random to it (IKNP receiver privacy), so nothing about the
// labels; the Broker learns, per position, whether its label is one of the two and nothing
// about the other label (F_p(y) for y ≠ x_p is pseudorandom to it) nor which of w0, w1 it
// holds (the pair is sorted). Security is semi-honest (spec §2.3), like package ot's IKNP: a
// Broker that deviates in the OPRF rows can learn bits of the Garbler's s and then more than
// membership. The base OTs are run once per session (Setup) and every check is a fresh
// extension batch at the session's next offset, so a check costs a few AES and two SHA-256
// calls per label instead of group operations.

// KKRTTransport carries the KKRT check's messages to the Garbler and its answers back (gRPC
// in the services; a loopback in tests). SetupKKRT runs once per session; EvaluateKKRT once
// per check, in the order the Broker made them.
type KKRTTransport interface {
	SetupKKRT(ctx context.Context, m *ot.KKRTSetup) (*ot.KKRTSetupReply, error)
	EvaluateKKRT(ctx context.Context, req *KKRTCheckRequest) (*KKRTCheckResponse, error)
}

// KKRTChecker is the Broker's side of the KKRT consistency check: a ConsistencyChecker
// whose checks share one base-OT session. Checks are serialised (a session's batches run in
// order). After a transport error or a bad response the session is dropped and the next
// check sets up a new one, since the Garbler's position in the old one is then unknown.
type KKRTChecker struct {
	Garbler KKRTTransport
	// Rand draws the base-OT secrets; nil means crypto/rand.
	Rand io.Reader

	mu   sync.Mutex
	recv *ot.KKRTReceiver
}

var _ ConsistencyChecker = (*KKRTChecker)(nil)

// Setup runs the base OTs of a new session with the Garbler, replacing any current one.
// Check calls it when there is no session; calling it ahead takes the base OTs off the
// first check's path.
func (c *KKRTChecker) Setup(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setup(ctx)
}

func (c *KKRTChecker) setup(ctx context.Context) error {
	c.recv = nil
	r, m, err := ot.NewKKRTReceiver(c.Rand)
	if err != nil {
		return fmt.Errorf("kkrt setup: %w", err)
	}
	reply, err := c.Garbler.SetupKKRT(ctx, m)
	if err != nil {
		return fmt.Errorf("kkrt setup: garbler: %w", err)
	}
	if err := r.Finish(reply); err != nil {
		return fmt.Errorf("kkrt setup: %w: %w", err, ErrMalformed)
	}
	c.recv = r
	return nil
}

// Check runs one consistency check. received must name each position at most once.
func (c *KKRTChecker) Check(ctx context.Context, exec ExecID, received []ReceivedLabel) ([]Position, error) {
	if len(received) == 0 {
		return nil, nil
	}
	if len(received) > MaxKKRTPositions {
		return nil, fmt.Errorf("kkrt check: %d labels, at most %d", len(received), MaxKKRTPositions)
	}
	recv := slices.Clone(received)
	defer clear(recv)
	slices.SortFunc(recv, func(a, b ReceivedLabel) int { return cmp.Compare(a.Pos, b.Pos) })
	for i := 1; i < len(recv); i++ {
		if recv[i].Pos == recv[i-1].Pos {
			return nil, fmt.Errorf("kkrt check: position %d received twice", recv[i].Pos)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recv == nil {
		if err := c.setup(ctx); err != nil {
			return nil, fmt.Errorf("kkrt check: %w", err)
		}
	}
	inputs := make([]ot.Block, len(recv))
	positions := make([]Position, len(recv))
	for i := range recv {
		inputs[i], positions[i] = ot.Block(recv[i].Label), recv[i].Pos
	}
	oreq, batch, err := c.recv.Encode(inputs)
	clear(inputs)
	if err != nil {
		return nil, fmt.Errorf("kkrt check: %w", err)
	}
	defer batch.Erase() // after Outputs a no-op; on a bad response it drops the rows
	req := &KKRTCheckRequest{Exec: exec, Positions: positions, OT: *oreq}
	resp, err := c.Garbler.EvaluateKKRT(ctx, req)
	if err != nil {
		c.recv = nil
		return nil, fmt.Errorf("kkrt check: garbler: %w", err)
	}
	if resp.Exec != exec || resp.Session != oreq.Session || resp.Offset != oreq.Offset || len(resp.Tags) != len(recv) {
		c.recv = nil
		return nil, fmt.Errorf("kkrt check: response for exec %x batch %d with %d positions, want %x batch %d with %d: %w",
			resp.Exec, resp.Offset, len(resp.Tags), exec, oreq.Offset, len(recv), ErrMalformed)
	}
	for i := range resp.Tags {
		if !tagPairSorted(&resp.Tags[i]) {
			c.recv = nil
			return nil, fmt.Errorf("kkrt check: tag pair %d not sorted: %w", i, ErrMalformed)
		}
	}
	outs, err := batch.Outputs()
	if err != nil {
		return nil, fmt.Errorf("kkrt check: %w", err)
	}
	defer clear(outs)
	var bad []Position
	for i := range outs {
		t := KKRTTag(outs[i][:KKRTTagSize])
		if t != resp.Tags[i][0] && t != resp.Tags[i][1] {
			bad = append(bad, recv[i].Pos)
		}
	}
	return bad, nil
}

// KKRTResponder is the Garbler's side of KKRTChecker for one session. Respond calls are
// serialised.
type KKRTResponder struct {
	mu     sync.Mutex
	sender *ot.KKRTSender
	rnd    io.Reader
}

// NewKKRTResponder answers the Broker's base-OT setup and keeps the session. rnd draws the
// base-OT secrets and the tags of positions without labels; nil means crypto/rand.
func NewKKRTResponder(rnd io.Reader, m *ot.KKRTSetup) (*KKRTResponder, *ot.KKRTSetupReply, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	s, reply, err := ot.NewKKRTSender(rnd, m)
	if err != nil {
		return nil, nil, fmt.Errorf("kkrt respond: setup: %w", err)
	}
	return &KKRTResponder{sender: s, rnd: rnd}, reply, nil
}

// Respond answers one check: the OPRF tags of both labels of every requested position,
// each pair sorted. A position whose labels the LabelSource cannot give (ErrRoundErased, an
// unknown slot) gets two random tags, so the Broker finds it inconsistent and the slot is
// nullified, as RespondPSI's leaving it out of R_G.
func (r *KKRTResponder) Respond(req *KKRTCheckRequest, labels LabelSource) (*KKRTCheckResponse, error) {
	n := len(req.Positions)
	if n != len(req.OT.Rows) || n > MaxKKRTPositions {
		return nil, fmt.Errorf("kkrt respond: %d positions, %d OPRF rows: %w", n, len(req.OT.Rows), ErrMalformed)
	}
	for i := 1; i < n; i++ {
		if req.Positions[i] <= req.Positions[i-1] {
			return nil, fmt.Errorf("kkrt respond: positions not strictly ascending at %d: %w", i, ErrMalformed)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	batch, err := r.sender.Extend(&req.OT)
	if err != nil {
		return nil, fmt.Errorf("kkrt respond: %w", err)
	}
	defer batch.Erase()
	// Labels are gathered in order on this goroutine (a LabelSource usually advances a
	// ratchet, which is single-writer).
	w0, w1 := make([]ot.Block, n), make([]ot.Block, n)
	defer clear(w0)
	defer clear(w1)
	missing := make([]bool, n)
	for i, pos := range req.Positions {
		pair, err := labels(pos)
		if err != nil {
			missing[i] = true
			continue
		}
		w0[i], w1[i] = ot.Block(pair[0]), ot.Block(pair[1])
		clear(pair[0][:])
		clear(pair[1][:])
	}
	f0, f1 := make([]ot.Block, n), make([]ot.Block, n)
	defer clear(f0)
	defer clear(f1)
	if err := batch.Eval(f0, w0); err != nil {
		return nil, fmt.Errorf("kkrt respond: %w", err)
	}
	if err := batch.Eval(f1, w1); err != nil {
		return nil, fmt.Errorf("kkrt respond: %w", err)
	}
	resp := &KKRTCheckResponse{Exec: req.Exec, Session: req.OT.Session, Offset: batch.Offset(), Tags: make([][2]KKRTTag, n)}
	for i := range resp.Tags {
		p := &resp.Tags[i]
		if missing[i] {
			if _, err := io.ReadFull(r.rnd, p[0][:]); err != nil {
				return nil, fmt.Errorf("kkrt respond: draw tags: %w", err)
			}
			if _, err := io.ReadFull(r.rnd, p[1][:]); err != nil {
				return nil, fmt.Errorf("kkrt respond: draw tags: %w", err)
			}
		} else {
			p[0], p[1] = KKRTTag(f0[i][:KKRTTagSize]), KKRTTag(f1[i][:KKRTTagSize])
		}
		sortTagPair(p)
	}
	return resp, nil
}

// sortTagPair puts the pair in ascending order without a branch on which is larger: the
// order of the Garbler's two values is what would tell the Broker which label it holds.
func sortTagPair(p *[2]KKRTTag) {
	const _ = uint(KKRTTagSize-8) + uint(8-KKRTTagSize) // a tag is one uint64
	x, y := binary.BigEndian.Uint64(p[0][:]), binary.BigEndian.Uint64(p[1][:])
	_, borrow := bits.Sub64(y, x, 0) // 1 iff y < x
	d := (x ^ y) & -borrow
	binary.BigEndian.PutUint64(p[0][:], x^d)
	binary.BigEndian.PutUint64(p[1][:], y^d)
}
