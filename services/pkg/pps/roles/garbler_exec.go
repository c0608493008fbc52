package roles

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// modeName is a mode as logs and metrics name it.
func modeName(m ppsv1.Mode) string {
	if m == ppsv1.Mode_MODE_HARDENED {
		return contract.ModeHardened
	}
	return contract.ModeFaithful
}

// execFunction returns the registered function fn or a gRPC error; faithfulOnly refuses a
// hardened-mode function (FAILED_PRECONDITION: H1 has no consistency check).
func (g *Garbler) execFunction(ctx context.Context, fn, what string, faithfulOnly bool) (*compiledFn, error) {
	cf, err := g.function(ctx, fn)
	if errors.Is(err, errNotFound) {
		return nil, g.reject(codes.NotFound, "unknown_function", fmt.Errorf("%s: function %.40q is not registered", what, fn))
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%s: %v", what, err)
	}
	if faithfulOnly && cf.mode != ppsv1.Mode_MODE_FAITHFUL {
		return nil, g.reject(codes.FailedPrecondition, "hardened_no_check", fmt.Errorf("%s: function %s is in hardened mode, which has no consistency check (D21)", what, fn))
	}
	return cf, nil
}

// slotSeeds are the round seeds of an execution's valid slots.
type slotSeeds struct {
	seeds      map[int]pps.Seed
	values     map[int]int
	erased     []uint32 // round seed erased, publisher unknown or round too far (§10 #8)
	notAllowed []uint32 // the publisher's signed policy does not allow the function (D13)
	// inputs are the execution's input wires, slot s's at s·ValueBits… derived when
	// derived[s]: as each publisher's seeds arrive (slotSeeds with derive, pps.ValueInputs),
	// so the derivation overlaps the other publishers' reads and the labels are written once,
	// where gc reads them (pps.GarblerInputsDerived completes them in place).
	inputs  []gc.Input
	derived []bool
}

// isDerived says whether slot s's inputs were derived as its seeds arrived.
func (s *slotSeeds) isDerived(slot int) bool { return s.derived != nil && s.derived[slot] }

// takeInputs hands the derived inputs over to the caller, who erases them.
func (s *slotSeeds) takeInputs() []gc.Input {
	in := s.inputs
	s.inputs = nil
	return in
}

// gone is the slots the garbler hard-wires to their identities on its own (erased or not
// allowed), in order.
func (s *slotSeeds) gone() []uint32 {
	g := slices.Concat(s.erased, s.notAllowed)
	slices.Sort(g)
	return g
}

func (s *slotSeeds) zero() {
	for k := range s.seeds {
		s.seeds[k] = pps.Seed{}
		delete(s.seeds, k)
	}
	clear(s.inputs)
}

// labels returns both labels of every bit of slot s's value (spec §8.2), derived now.
func (s *slotSeeds) labels(slot int) (*[pps.ValueBits]pps.LabelPair, error) {
	seed, ok := s.seeds[slot]
	if !ok {
		return nil, fmt.Errorf("slot %d: %w", slot, pps.ErrRoundErased)
	}
	l := pps.ValueLabels(&seed, s.values[slot])
	seed.Zero()
	return &l, nil
}

// labelSource is a pps.LabelSource over the slots' seeds for positions in ascending order:
// it derives one slot's 32 label pairs at a time and erases them when it moves on; done
// erases the last.
func (s *slotSeeds) labelSource() (source pps.LabelSource, done func()) {
	var (
		curSlot = -1
		cur     *[pps.ValueBits]pps.LabelPair
	)
	done = func() {
		if cur != nil {
			clear(cur[:])
		}
	}
	source = func(p pps.Position) (pps.LabelPair, error) {
		if p.Slot() != curSlot {
			done()
			cur = nil
			curSlot = p.Slot()
			l, err := s.labels(curSlot)
			if err != nil {
				return pps.LabelPair{}, err
			}
			cur = l
		}
		if cur == nil {
			return pps.LabelPair{}, pps.ErrRoundErased
		}
		return cur[p.Bit()], nil
	}
	return source, done
}

// maxSeedFetches bounds the publishers whose round seeds one execution fetches at once.
const maxSeedFetches = 8

// slotSeeds checks the broker's slot inputs and fetches their round seeds, advancing the
// publishers' ratchets (spec §8.1, D8); with derive it also derives each valid slot's label
// pairs as soon as its publisher's seeds are in.
func (g *Garbler) slotSeeds(ctx context.Context, cf *compiledFn, inputs []*ppsv1.SlotInput, derive bool) (*slotSeeds, error) {
	n := len(cf.f.Layout.Slots)
	byPub := map[string][]*ppsv1.SlotInput{}
	seen := make([]bool, n)
	for _, in := range inputs {
		s := int(in.GetSlot())
		if in.GetSlot() >= uint32(n) || seen[s] {
			return nil, g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("slot %d: out of range of %d slots or repeated", in.GetSlot(), n))
		}
		seen[s] = true
		if err := contract.ValidDeviceID(in.GetPubId()); err != nil {
			return nil, g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("slot %d: %w", s, err))
		}
		if in.GetValue() >= contract.MaxPublishValues {
			return nil, g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("slot %d: value index %d, at most %d values per message", s, in.GetValue(), contract.MaxPublishValues))
		}
		byPub[in.GetPubId()] = append(byPub[in.GetPubId()], in)
	}
	out := &slotSeeds{seeds: map[int]pps.Seed{}, values: map[int]int{}}
	if derive {
		out.inputs, out.derived = make([]gc.Input, cf.f.Layout.InputWires()), make([]bool, n)
	}
	ttl := g.retention(cf)
	pubs := make([]string, 0, len(byPub))
	for p := range byPub {
		pubs = append(pubs, p)
	}
	slices.Sort(pubs)
	minInputs := cf.f.Layout.MinInputs
	allow := func(p *contract.Policy) bool { return p.Allows(cf.f.ID, minInputs) }
	// The publishers' ratchets are independent records (one WATCH transaction each): fetch
	// them side by side, so the Redis round trips and the openings overlap (9 publishers of
	// 288 retained rounds: 7.5 ms one after the other at load 5), and merge in order.
	results := make([]*roundSeeds, len(pubs))
	errs := make([]error, len(pubs))
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range min(len(pubs), maxSeedFetches) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(pubs); i = int(next.Add(1) - 1) {
				ins := byPub[pubs[i]]
				rounds := make([]uint64, len(ins))
				for j, in := range ins {
					rounds[j] = in.GetRound()
				}
				results[i], errs[i] = g.publisherSeeds(ctx, pubs[i], rounds, ttl, allow)
				if rs := results[i]; derive && errs[i] == nil && !rs.refused {
					for _, in := range ins {
						if seed, ok := rs.seeds[in.GetRound()]; ok {
							s := int(in.GetSlot())
							pps.ValueInputs(&seed, int(in.GetValue()), out.inputs[s*pps.ValueBits:])
							out.derived[s] = true
							seed.Zero()
						}
					}
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, rs := range results {
			if rs != nil {
				rs.zero()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	for i, pub := range pubs {
		rs := results[i]
		for _, in := range byPub[pub] {
			s := int(in.GetSlot())
			switch seed, ok := rs.seeds[in.GetRound()]; {
			case rs.refused:
				out.notAllowed = append(out.notAllowed, in.GetSlot())
			case !ok:
				out.erased = append(out.erased, in.GetSlot())
			default:
				out.seeds[s], out.values[s] = seed, int(in.GetValue())
			}
		}
	}
	slices.Sort(out.erased)
	slices.Sort(out.notAllowed)
	g.m.erased.Add(float64(len(out.erased) + len(out.notAllowed)))
	return out, nil
}

// CheckConsistency is the garbler's side of the consistency check (spec §3.4, §8.4, D16a):
// it regenerates both labels of every requested position from the publishers' round seeds
// and answers the broker's OPRF-PSI request (pps.RespondPSI). A slot whose seed it no
// longer holds is reported erased and gets no labels, so the broker also finds it
// inconsistent; only the broker learns which labels matched.
func (g *Garbler) CheckConsistency(ctx context.Context, req *ppsv1.CheckConsistencyRequest) (*ppsv1.CheckConsistencyResponse, error) {
	cf, err := g.execFunction(ctx, req.GetFnId(), "consistency check", true)
	if err != nil {
		return nil, err
	}
	var psi pps.PSIRequest
	if err := psi.UnmarshalBinary(req.GetPsiRequest()); err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_psi", fmt.Errorf("consistency check: %w", err))
	}
	for _, p := range psi.Positions {
		if p.Slot() >= len(cf.f.Layout.Slots) {
			return nil, g.reject(codes.InvalidArgument, "malformed_psi", fmt.Errorf("consistency check: position %d beyond the function's %d slots", p, len(cf.f.Layout.Slots)))
		}
	}
	ss, err := g.slotSeeds(ctx, cf, req.GetSlots(), false)
	if err != nil {
		return nil, err
	}
	defer ss.zero()
	source, done := ss.labelSource()
	defer done()
	resp, err := pps.RespondPSI(&psi, source)
	if err != nil {
		return nil, g.reject(codes.InvalidArgument, "malformed_psi", fmt.Errorf("consistency check: %w", err))
	}
	b, err := resp.MarshalBinary()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "consistency check: %v", err)
	}
	g.m.checks.Inc()
	g.m.psiElems.Add(float64(len(psi.Positions)))
	erased := ss.gone()
	g.log.Debug("consistency check answered", "fn", cf.f.ID, "positions", len(psi.Positions), "erased_slots", len(erased))
	return &ppsv1.CheckConsistencyResponse{PsiResponse: b, ErasedSlots: erased}, nil
}

// garbleContext is what the gc stream header's context carries for PPS: the function id
// (32 ASCII hex characters), then the function round ρ and the key epoch, LE64 each.
func garbleContext(fn string, round, epoch uint64) []byte {
	b := append([]byte(nil), fn...)
	b = binary.LittleEndian.AppendUint64(b, round)
	return binary.LittleEndian.AppendUint64(b, epoch)
}

// Garble garbles one execution (spec §8.5) and streams it: the GarbleHeader, then the gc
// stream in data messages of at most the chunk size, written by gc.Garble through
// streamSender as it garbles, so memory is one chunk whatever the circuit's size (§10 #14).
// The broker's nullified slots, the slots whose seed is erased and the slots whose policy
// refuses the function are hard-wired to their identities (D12); the output is masked with
// r = PRG(s'_ρ) of a freshly allocated function round ρ, persisted before use (§10 #7).
func (g *Garbler) Garble(req *ppsv1.GarbleRequest, stream ppsv1.Garbler_GarbleServer) (err error) {
	ctx := stream.Context()
	start := time.Now()
	outcome := "error"
	defer func() {
		if status.Code(err) == codes.Canceled {
			outcome = "cancelled"
		}
		g.m.executions.WithLabelValues(outcome).Inc()
	}()
	cf, err := g.execFunction(ctx, req.GetFnId(), "garble", false)
	if err != nil {
		return err
	}
	if !bytes.Equal(req.GetCircuitHash(), cf.hash[:]) {
		return g.reject(codes.FailedPrecondition, "circuit_mismatch", fmt.Errorf("garble: circuit hash %x is not function %s's %x", req.GetCircuitHash(), cf.f.ID, cf.hash))
	}
	hardened := cf.mode == ppsv1.Mode_MODE_HARDENED
	var pre *pregarbled // the execution garbled ahead (Pregarble), used once whatever happens
	if id := req.GetPregarbledExecId(); len(id) > 0 {
		pre = g.pre.take(id)
		if pre == nil || pre.fn != cf.f.ID || pre.hash != cf.hash || hardened {
			if pre != nil {
				pre.pg.Erase()
			}
			return g.reject(codes.FailedPrecondition, "pregarbled_unknown", fmt.Errorf("garble: %w", errPregarbledUnknown))
		}
		defer pre.pg.Erase()
	}
	var otReq *ot.ExtendRequest
	switch {
	case hardened && len(req.GetOtRequest()) == 0:
		return g.reject(codes.InvalidArgument, "bad_request", errors.New("garble: no OT request for a hardened-mode function"))
	case hardened:
		otReq = new(ot.ExtendRequest)
		if err := otReq.UnmarshalBinary(req.GetOtRequest()); err != nil {
			return g.reject(codes.InvalidArgument, "malformed_ot", fmt.Errorf("garble: %w", err))
		}
	case len(req.GetOtRequest()) > 0:
		return g.reject(codes.InvalidArgument, "bad_request", errors.New("garble: an OT request for a faithful-mode function"))
	}
	chunk := g.opts.ChunkBytes
	if c := int(req.GetChunkBytes()); c != 0 {
		chunk = min(max(c, MinChunkBytes), MaxChunkBytes)
	}
	n := len(cf.f.Layout.Slots)
	nulls := map[int]pps.NullReason{}
	for _, x := range req.GetNullified() {
		if x.GetSlot() >= uint32(n) || x.GetReason() == uint32(pps.Valid) || x.GetReason() > uint32(pps.Erased) {
			return g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("garble: nullified slot %d with reason %d", x.GetSlot(), x.GetReason()))
		}
		if _, dup := nulls[int(x.GetSlot())]; dup {
			return g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("garble: slot %d nullified twice", x.GetSlot()))
		}
		nulls[int(x.GetSlot())] = pps.NullReason(x.GetReason())
	}
	for _, in := range req.GetSlots() {
		if _, both := nulls[int(in.GetSlot())]; both {
			return g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("garble: slot %d is both valid and nullified", in.GetSlot()))
		}
	}
	if len(req.GetSlots())+len(nulls) != n {
		return g.reject(codes.InvalidArgument, "bad_slots", fmt.Errorf("garble: %d valid and %d nullified slots for a function of %d", len(req.GetSlots()), len(nulls), n))
	}
	ss, err := g.slotSeeds(ctx, cf, req.GetSlots(), !hardened)
	if err != nil {
		return err
	}
	defer ss.zero()
	var (
		roundCh      chan allocatedRound // faithful mode: the round allocated beside the labels
		a            *pps.Assignment
		inputs       []gc.Input
		garblerNulls = ss.gone()
		otResponse   []byte
	)
	if hardened {
		var hg *pps.HardenedGarbling
		hg, otResponse, err = g.hardenedInputs(cf, nulls, ss, otReq)
		if err != nil {
			return err
		}
		a, inputs, garblerNulls = hg.Assignment, hg.Inputs, hg.Erased
	} else {
		for _, s := range ss.erased {
			nulls[int(s)] = pps.Erased
		}
		for _, s := range ss.notAllowed {
			nulls[int(s)] = pps.NotAllowed
		}
		a, err = pps.Nullify(&cf.f.Layout, nulls)
		if errors.Is(err, pps.ErrInsufficient) {
			return g.reject(codes.FailedPrecondition, "insufficient", fmt.Errorf("garble: %w", err))
		}
		if err != nil {
			return status.Errorf(codes.Internal, "garble: %v", err)
		}
		// The function round is allocated (a Redis transaction) while the slots' inputs
		// (derived in place as the seeds arrived) get their constants.
		roundCh = make(chan allocatedRound, 1)
		go func() {
			var ar allocatedRound
			ar.epoch, ar.round, ar.seed, ar.err = g.allocateRound(ctx, cf.f.ID)
			roundCh <- ar
		}()
		defer func() {
			if roundCh != nil { // not taken: erase its seed
				ar := <-roundCh
				ar.seed.Zero()
			}
		}()
		inputs, err = pps.GarblerInputsDerived(a, ss.takeInputs(), ss.isDerived, ss.labels)
	}
	ss.zero()
	if err != nil {
		return status.Errorf(codes.Internal, "garble: %v", err)
	}
	defer clear(inputs)
	if g.inputsSeen != nil {
		g.inputsSeen(cf.f.ID, inputs)
	}
	nConst := 0
	for i := range inputs {
		if inputs[i].Const {
			nConst++
		}
	}
	var ar allocatedRound
	if roundCh != nil {
		ar = <-roundCh
		roundCh = nil
	} else {
		ar.epoch, ar.round, ar.seed, ar.err = g.allocateRound(ctx, cf.f.ID)
	}
	epoch, round := ar.epoch, ar.round
	if ar.err != nil {
		return status.Errorf(codes.Unavailable, "garble: %v", ar.err)
	}
	mask := pps.OutputMask(&ar.seed, cf.f.OutputBits())
	ar.seed.Zero()
	defer clear(mask)
	gctx := garbleContext(cf.f.ID, round, epoch)
	size := gc.StreamSize(cf.plan, nConst, len(gctx))
	if pre != nil {
		size = gc.InputsSize(cf.plan, nConst, len(gctx))
	}
	w := &streamSender{send: stream.Send, chunk: chunk, header: &ppsv1.GarbleHeader{
		Round: round, Epoch: epoch, OutputBits: uint32(cf.f.OutputBits()), ErasedSlots: garblerNulls,
		StreamBytes: uint64(size), Valid: uint32(a.ValidCount()), OtResponse: otResponse}}
	var h *gc.Header
	if pre != nil {
		h, err = pre.pg.Garble(ctx, w, inputs, mask, &gc.Options{Context: gctx, ChunkSize: chunk})
	} else {
		h, err = gc.Garble(ctx, cf.plan, w, inputs, mask, &gc.Options{Context: gctx, ChunkSize: chunk})
	}
	if err != nil {
		if ctx.Err() != nil {
			return status.Errorf(codes.Canceled, "garble: %v", ctx.Err())
		}
		return status.Errorf(codes.Internal, "garble: %v", err)
	}
	if w.header != nil || w.sent != size {
		return status.Errorf(codes.Internal, "garble: streamed %d bytes, the stream is %d", w.sent, size)
	}
	outcome = "ok"
	secs := time.Since(start).Seconds()
	if pre == nil { // a pregarbled execution's gates were counted by Pregarble
		g.m.ands.Add(float64(cf.plan.ANDCount()))
	}
	g.m.bytes.Add(float64(size))
	g.m.garbleSecs.Observe(secs)
	g.log.Info("garbled", "fn", cf.f.ID, "mode", modeName(cf.mode), "exec", fmt.Sprintf("%x", h.ExecID), "round", round, "epoch", epoch,
		"valid", a.ValidCount(), "and_gates", cf.plan.ANDCount(), "pregarbled", pre != nil, "bytes", size, "chunks", w.msgs, "seconds", secs)
	return nil
}

// allocatedRound is allocateRound's result, from a goroutine.
type allocatedRound struct {
	epoch, round uint64
	seed         pps.Seed
	err          error
}

// hardenedInputs is the garbler's side of an H1 execution (D21): it answers the broker's
// correlated-OT request on the broker's session with the pairs of every valid slot's bits,
// swapped by the slot's mask m = pps.InputMask of its publisher's round seed, so the label
// the broker receives for y_j = x_j ⊕ m_j is the label of x_j. Slots whose seed is erased or
// whose policy refuses the function become erased (constants) after the OTs, which the
// broker counted on its assignment, so both sides stay at the same session offset. The
// session is held for the OT step only, so executions of one broker run in order there.
func (g *Garbler) hardenedInputs(cf *compiledFn, nulls map[int]pps.NullReason, ss *slotSeeds, req *ot.ExtendRequest) (*pps.HardenedGarbling, []byte, error) {
	a, err := pps.Nullify(&cf.f.Layout, nulls)
	if errors.Is(err, pps.ErrInsufficient) {
		return nil, nil, g.reject(codes.FailedPrecondition, "insufficient", fmt.Errorf("garble: %w", err))
	}
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "garble: %v", err)
	}
	gone := map[int]bool{}
	for _, s := range slices.Concat(ss.erased, ss.notAllowed) {
		gone[int(s)] = true
	}
	masks := func(slot int) (uint32, error) {
		seed, ok := ss.seeds[slot]
		if gone[slot] || !ok {
			return 0, fmt.Errorf("slot %d: %w", slot, pps.ErrRoundErased)
		}
		m := pps.InputMask(&seed, ss.values[slot])
		seed.Zero()
		return m, nil
	}
	sess, ok := g.ots.get(req.Session)
	if !ok {
		return nil, nil, g.reject(codes.Aborted, "ot_session_unknown", fmt.Errorf("garble: %w", errOTSessionUnknown))
	}
	sess.mu.Lock()
	hg, err := pps.HardenedGarblerInputs(a, masks, sess.sender, req)
	sess.mu.Unlock()
	switch {
	case errors.Is(err, ot.ErrOutOfOrder), errors.Is(err, ot.ErrSession):
		g.ots.drop(req.Session)
		g.m.otSessions.Set(float64(g.ots.len()))
		return nil, nil, g.reject(codes.Aborted, "ot_out_of_order", fmt.Errorf("garble: %w; run OTSetup again", err))
	case errors.Is(err, pps.ErrInsufficient):
		return nil, nil, g.reject(codes.FailedPrecondition, "insufficient", fmt.Errorf("garble: %w", err))
	case errors.Is(err, pps.ErrMalformed), errors.Is(err, ot.ErrMalformed):
		return nil, nil, g.reject(codes.InvalidArgument, "malformed_ot", fmt.Errorf("garble: %w", err))
	case err != nil:
		return nil, nil, status.Errorf(codes.Internal, "garble: %v", err)
	}
	reply, err := hg.Reply.MarshalBinary()
	if err != nil {
		clear(hg.Inputs)
		return nil, nil, status.Errorf(codes.Internal, "garble: %v", err)
	}
	g.m.ots.Add(float64(req.Count))
	return hg, reply, nil
}

// streamSender is the io.Writer gc.Garble writes the stream to: it sends the GarbleHeader
// once the stream's execution id (bytes 8–24 of the gc header) has gone by, then every write
// as data messages of at most chunk bytes (and maxDataMessage). It holds nothing but those first 24 bytes: gc
// buffers one chunk and hands it over, and Send encodes it before returning.
// maxDataMessage bounds the garbled bytes of one data message so that the encoded message
// (the bytes, a field tag and a 3-byte length) fits gRPC's 32 KiB pooled buffer on both
// sides. gRPC takes each message's buffer from a pool of 256 B, 4, 16, 32 KiB and 1 MiB
// buffers and zeroes the whole buffer it hands out: a 64 KiB chunk in one message took and
// zeroed a 1 MiB buffer per message on each side (13 % of the tick's CPU, Table 2 mean).
// The chunk stays gc's flush unit and the evaluator's window; a chunk goes out as one or more
// messages.
const maxDataMessage = 32<<10 - 64

type streamSender struct {
	send   func(*ppsv1.GarbleResponse) error
	chunk  int
	header *ppsv1.GarbleHeader // nil once sent
	pre    [24]byte
	npre   int
	sent   int64
	msgs   int
}

func (w *streamSender) Write(p []byte) (int, error) {
	n := len(p)
	if w.header != nil {
		held := w.npre
		take := min(len(p), len(w.pre)-w.npre)
		copy(w.pre[w.npre:], p[:take])
		w.npre += take
		if w.npre < len(w.pre) {
			return n, nil // all of p is held in pre
		}
		w.header.ExecId = append([]byte(nil), w.pre[8:24]...)
		if err := w.send(&ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Header{Header: w.header}}); err != nil {
			return 0, err
		}
		w.header = nil
		if held > 0 {
			if err := w.data(w.pre[:held]); err != nil {
				return 0, err
			}
		}
	}
	for len(p) > 0 {
		c := min(len(p), w.chunk, maxDataMessage)
		if err := w.data(p[:c]); err != nil {
			return 0, err
		}
		p = p[c:]
	}
	return n, nil
}

func (w *streamSender) data(b []byte) error {
	if err := w.send(&ppsv1.GarbleResponse{Chunk: &ppsv1.GarbleResponse_Data{Data: b}}); err != nil {
		return err
	}
	w.sent += int64(len(b))
	w.msgs++
	return nil
}
