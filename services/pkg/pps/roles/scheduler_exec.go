package roles

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// schedSlot is one input slot of an execution as the broker resolved it (D9).
type schedSlot struct {
	pub    string
	round  uint64
	value  int
	labels []pps.Label // faithful: the 32 labels received for the slot's value, bit 0 first
	masked uint32      // hardened (H1, D21): y = x ⊕ m received for the slot's value
	reason pps.NullReason
}

func (s *schedSlot) input(slot int) *ppsv1.SlotInput {
	return &ppsv1.SlotInput{Slot: uint32(slot), PubId: s.pub, Round: s.round, Value: uint32(s.value)}
}

// resolve resolves a function's slots for the tick at `at` (D9): `val` is the latest round
// received within the window before the tick, `window N` the N rounds ending there (slot
// with lag k reads latest−k), `static` the latest round the broker retains. A publisher
// whose policy does not allow the function is nullified as not allowed (P_C, D13) and its
// labels are not read; a slot whose round did not arrive is missing.
func (b *Broker) resolve(ctx context.Context, set *brokerSet, f *brokerFunction, at time.Time) ([]schedSlot, error) {
	since := at.Add(-f.p.Window.Duration)
	// The publishers' policies, then the latest rounds the slots read: one round trip each.
	var devs []string
	devOf := map[string]int{}
	for _, dev := range f.slotPub {
		if _, ok := devOf[dev]; !ok {
			devOf[dev] = len(devs)
			devs = append(devs, dev)
		}
	}
	pols, err := b.store.Policies(ctx, devs)
	if err != nil {
		return nil, err
	}
	why := make([]pps.NullReason, len(devs))
	for i, pol := range pols {
		switch {
		case pol == nil:
			why[i] = pps.Missing
		case !pol.Allows(f.f.ID, f.f.Layout.MinInputs):
			why[i] = pps.NotAllowed
		}
	}
	type query struct {
		dev    int
		static bool // `static` reads the latest round retained, not within the window
	}
	queryOf := map[query]int{}
	var qs []RoundQuery
	slotQuery := make([]int, len(f.f.Layout.Slots))
	for s, spec := range f.f.Layout.Slots {
		d := devOf[f.slotPub[s]]
		if why[d] != pps.Valid {
			continue
		}
		q := query{dev: d, static: spec.Source == pps.Static}
		i, ok := queryOf[q]
		if !ok {
			i = len(qs)
			queryOf[q] = i
			from := since
			if q.static {
				from = time.Time{}
			}
			qs = append(qs, RoundQuery{Pub: devs[d], Since: from, Until: at})
		}
		slotQuery[s] = i
	}
	latest, err := b.store.LatestRounds(ctx, qs)
	if err != nil {
		return nil, err
	}
	slots := make([]schedSlot, len(f.f.Layout.Slots))
	for s, spec := range f.f.Layout.Slots {
		sl := &slots[s]
		sl.pub, sl.value = f.slotPub[s], f.slotValue[s]
		if r := why[devOf[sl.pub]]; r != pps.Valid {
			sl.reason = r
			continue
		}
		l := latest[slotQuery[s]]
		sl.round = l.Round
		if spec.Source == pps.Window {
			if uint64(spec.Lag) > l.Round {
				l.OK = false
			} else {
				sl.round = l.Round - uint64(spec.Lag)
			}
		}
		if !l.OK {
			sl.reason = pps.Missing
		}
	}
	// The labels (or H1 masked values) of every slot still valid, in one round trip.
	var refs []LabelRef
	var idx []int
	for s := range slots {
		if slots[s].reason == pps.Valid {
			refs = append(refs, LabelRef{Pub: slots[s].pub, Round: slots[s].round})
			idx = append(idx, s)
		}
	}
	read := b.store.LabelsOf
	if f.hardened {
		read = b.store.MaskedOf
	}
	payloads, err := read(ctx, refs)
	if err != nil {
		return nil, err
	}
	for i, s := range idx {
		sl := &slots[s]
		if payloads[i] == nil {
			sl.reason = pps.Missing
			continue
		}
		if f.hardened {
			var ys []uint32
			if ys, err = pps.SplitMasked(payloads[i], len(set.topics[sl.pub])); err == nil {
				sl.masked = ys[sl.value]
			}
		} else {
			sl.labels, err = splitLabels(payloads[i], len(set.topics[sl.pub]), sl.value)
		}
		if err != nil {
			sl.reason = pps.Missing
		}
	}
	return slots, nil
}

// execute runs one execution of f for tick (spec §8.8) and records it.
func (b *Broker) execute(ctx context.Context, f *brokerFunction, tick uint64, at time.Time) {
	e := &Execution{Tick: tick, At: at}
	err := b.run(ctx, f, tick, at, e)
	// The latency runs from the window's end (the tick) to the published output.
	end := b.clk.Now()
	e.Total = max(end.Sub(at), 0)
	switch {
	case err != nil && ctx.Err() != nil:
		// The broker is stopping: the execution was cancelled where it stood (the garbler's
		// Garble stops with it), nothing was published, and the tick is not run again.
		e.Status, e.Error = contract.StatusFailed, "cancelled: broker stopping: "+err.Error()
		b.log.Info("execution cancelled, broker stopping", "pipeline", f.p.Name, "tick", tick)
	case err != nil:
		e.Status, e.Error = contract.StatusFailed, err.Error()
		b.log.Warn("execution failed", "pipeline", f.p.Name, "tick", tick, "err", err)
	}
	name := f.p.Name
	b.m.Executions.WithLabelValues(name, e.Status).Inc()
	b.m.Latency.WithLabelValues(name, "total").Observe(e.Total.Seconds())
	b.m.LastTime.WithLabelValues(name).Set(float64(end.UnixNano()) / 1e9)
	b.m.LastRound.WithLabelValues(name).Set(float64(e.Round))
	b.m.LastValid.WithLabelValues(name).Set(float64(e.Valid))
	b.m.LastLatency.WithLabelValues(name).Set(e.Total.Seconds())
	for _, st := range []string{contract.StatusOK, contract.StatusInsufficient, contract.StatusFailed} {
		v := 0.0
		if st == e.Status {
			v = 1
		}
		b.m.LastStatus.WithLabelValues(name, st).Set(v)
	}
	for r, slots := range e.Nullified {
		b.m.Nullified.WithLabelValues(f.p.Name, r).Add(float64(len(slots)))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := b.store.RecordExecution(rctx, f.f.ID, e); err != nil {
		b.log.Warn("record execution", "pipeline", f.p.Name, "err", err)
	}
	if err == nil {
		b.log.Info("execution", "pipeline", f.p.Name, "mode", e.Mode, "tick", tick, "status", e.Status, "valid", e.Valid,
			"and_gates", e.ANDGates, "bytes", e.Bytes, "check", e.Check, "garble", e.Garble, "evaluate", e.Evaluate)
	}
}

func (b *Broker) run(ctx context.Context, f *brokerFunction, tick uint64, at time.Time, e *Execution) error {
	set := b.current()
	slots, err := b.resolve(ctx, set, f, at)
	if err != nil {
		return fmt.Errorf("resolve slots: %w", err)
	}
	var exec pps.ExecID
	if _, err := io.ReadFull(b.rand, exec[:]); err != nil {
		return err
	}
	e.Exec = hex.EncodeToString(exec[:])

	e.Mode = contract.ModeFaithful
	if f.hardened {
		e.Mode = contract.ModeHardened
	}
	// Consistency check (spec §3.4) over the labels of every slot still valid. H1 has none
	// (D21): every masked value y is a valid input, and no publisher holds a label.
	if !f.hardened {
		if err := b.check(ctx, f, exec, slots, e); err != nil {
			return err
		}
	}
	nulls := map[int]pps.NullReason{}
	e.Nullified = map[string][]uint32{}
	for s := range slots {
		if r := slots[s].reason; r != pps.Valid {
			nulls[s] = r
			e.Nullified[r.String()] = append(e.Nullified[r.String()], uint32(s))
		}
	}
	a, err := pps.Nullify(&f.f.Layout, nulls)
	if errors.Is(err, pps.ErrInsufficient) {
		e.Status, e.Valid = contract.StatusInsufficient, a.ValidCount()
		f.mu.Lock()
		epoch := f.epoch
		f.mu.Unlock()
		return b.publishOutput(ctx, f, tick, &contract.Output{V: contract.Version, Fn: f.f.ID, Exec: e.Exec,
			Epoch: epoch, Valid: a.ValidCount(), Status: contract.StatusInsufficient})
	}
	if err != nil {
		return fmt.Errorf("nullify: %w", err)
	}

	// Garble, and evaluate while the stream arrives.
	req := &ppsv1.GarbleRequest{FnId: f.f.ID, ChunkBytes: uint32(b.opt.ChunkBytes)}
	hash := f.plan.Hash() // the circuit's hash, computed once when the plan was compiled
	req.CircuitHash = hash[:]
	for s := range slots {
		if slots[s].reason == pps.Valid {
			req.Slots = append(req.Slots, slots[s].input(s))
		} else {
			req.Nullified = append(req.Nullified, &ppsv1.Nullified{Slot: uint32(s), Reason: uint32(slots[s].reason)})
		}
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	var (
		stream  grpc.ServerStreamingClient[ppsv1.GarbleResponse]
		hdr     *ppsv1.GarbleHeader
		hlabels []gc.Label // H1: the labels the OT reply gave
		tables  *gc.Tables // faithful, garbled ahead: the execution's AND tables
	)
	var flabels []gc.Label // faithful: the evaluator's input labels, built while the garbler works
	if f.hardened {
		masked := func(s int) (uint32, bool) { return slots[s].masked, slots[s].reason == pps.Valid }
		stream, hdr, hlabels, err = b.hardenedGarble(gctx, a, masked, req)
	} else {
		// Garbled ahead: the garbler streams the inputs-dependent part only; if it no longer
		// holds that execution, the execution is garbled in full.
		if tables, e.Ahead = f.takeTables(); tables != nil {
			id := tables.ExecID()
			req.PregarbledExecId = id[:]
		}
		// While the garbler works: the labels placed, and for an execution garbled ahead their
		// identity hashes computed (they need only the labels and the tables' header), so the
		// inputs stream's identity gates cost one XOR per wire as it arrives.
		var lerr error
		built := make(chan struct{})
		go func(tables *gc.Tables) {
			defer close(built)
			flabels, lerr = pps.EvaluatorLabels(a, func(s int) []pps.Label { return slots[s].labels })
			if lerr == nil && tables != nil {
				lerr = tables.Prehash(flabels, runtime.GOMAXPROCS(0))
			}
		}(tables)
		stream, hdr, err = b.garbleHeader(gctx, req)
		if tables != nil && status.Code(errors.Unwrap(err)) == codes.FailedPrecondition && strings.Contains(err.Error(), "pregarbled") {
			b.log.Info("garbled-ahead execution refused by the garbler, garbling in full", "pipeline", f.p.Name, "err", err)
			tables, req.PregarbledExecId, e.Ahead = nil, nil, 0
			stream, hdr, err = b.garbleHeader(gctx, req)
		}
		<-built
		defer clear(flabels)
		if err == nil {
			err = lerr
		}
	}
	if err != nil {
		return err
	}
	defer clear(hlabels)
	e.Garble = time.Since(t0)
	b.m.Latency.WithLabelValues(f.p.Name, "garble").Observe(e.Garble.Seconds())
	if int(hdr.OutputBits) != f.f.OutputBits() {
		return fmt.Errorf("garble: %d output bits, function has %d", hdr.OutputBits, f.f.OutputBits())
	}
	for _, s := range hdr.ErasedSlots {
		if int(s) >= len(slots) || slots[s].reason != pps.Valid {
			return fmt.Errorf("garble: garbler erased slot %d, which was not valid", s)
		}
		slots[s].reason = pps.Erased
		e.Nullified[pps.Erased.String()] = append(e.Nullified[pps.Erased.String()], s)
	}
	t0 = time.Now()
	rd := streamReader(stream, hdr.StreamBytes)
	// A slot the garbler erased is a constant in the stream: its label here is not read.
	labels := hlabels
	if !f.hardened {
		labels = flabels
	}
	var res *gc.Result
	if tables != nil {
		res, err = gc.EvaluatePregarbled(gctx, f.plan, tables, rd, labels, &gc.Options{ChunkSize: b.opt.ChunkBytes})
		clear(labels)
		if err != nil {
			return fmt.Errorf("evaluate: %w", err)
		}
		if !bytes.Equal(res.Header.ExecID[:], hdr.ExecId) {
			return errors.New("garbled stream: execution id differs from the header's")
		}
	} else if res, err = b.evaluateStream(gctx, f, hdr, rd, labels); err != nil {
		return err
	}
	if err := rd.finish(); err != nil {
		return fmt.Errorf("garbled stream: %w", err)
	}
	e.Evaluate = time.Since(t0)
	b.m.Latency.WithLabelValues(f.p.Name, "evaluate").Observe(e.Evaluate.Seconds())
	e.Exec = hex.EncodeToString(hdr.ExecId)
	e.Status, e.Round, e.Epoch, e.Valid = contract.StatusOK, hdr.Round, hdr.Epoch, int(hdr.Valid)
	e.ANDGates, e.Bytes = uint64(f.plan.ANDCount()), hdr.StreamBytes
	if tables != nil {
		e.AheadBytes = uint64(gc.TablesSize(f.plan, 0))
		e.Bytes += e.AheadBytes
	}
	b.m.CircuitBytes.WithLabelValues(f.p.Name).Set(float64(e.Bytes))
	if err := b.publishOutput(ctx, f, tick, &contract.Output{V: contract.Version, Fn: f.f.ID, Exec: e.Exec,
		Round: hdr.Round, Epoch: hdr.Epoch, Masked: res.Masked, Bits: f.f.OutputBits(), Valid: int(hdr.Valid),
		Status: contract.StatusOK}); err != nil {
		return err
	}
	b.release(ctx, set, f, slots)
	return nil
}

// evaluateStream evaluates a whole garbled stream as it arrives.
func (b *Broker) evaluateStream(ctx context.Context, f *brokerFunction, hdr *ppsv1.GarbleHeader, rd io.Reader, labels []gc.Label) (*gc.Result, error) {
	gh, err := gc.ReadHeader(rd)
	if err != nil {
		return nil, fmt.Errorf("garbled stream: %w", err)
	}
	if !bytes.Equal(gh.ExecID[:], hdr.ExecId) {
		return nil, errors.New("garbled stream: execution id differs from the header's")
	}
	res, err := gc.EvaluateAfterHeader(ctx, f.plan, gh, rd, labels, &gc.Options{ChunkSize: b.opt.ChunkBytes})
	clear(labels)
	if err != nil {
		return nil, fmt.Errorf("evaluate: %w", err)
	}
	return res, nil
}

// check is the consistency check of a faithful execution (spec §3.4) over the labels of
// every slot still valid, with the pipeline's checker (its own, else the broker's default):
// KKRT (D16b) over the replica's session, or the OPRF-PSI (D16a). Slots the garbler reports
// erased and slots with a label that is not one of the wire's two become nullified.
func (b *Broker) check(ctx context.Context, f *brokerFunction, exec pps.ExecID, slots []schedSlot, e *Execution) error {
	e.Checker = f.p.Check
	if e.Checker == "" {
		e.Checker = b.opt.Check
	}
	var recv []pps.ReceivedLabel
	var checked []*ppsv1.SlotInput
	for s := range slots {
		if slots[s].reason != pps.Valid {
			continue
		}
		// Labels found consistent during the window (broker_window.go) are not checked
		// again if they are exactly the labels this execution evaluates.
		if b.opt.WindowCheck && e.Checker == contract.CheckKKRT &&
			b.win.checked(windowKey{pub: slots[s].pub, round: slots[s].round, value: slots[s].value}, slots[s].labels) {
			e.WindowChecked++
			continue
		}
		checked = append(checked, slots[s].input(s))
		for j, l := range slots[s].labels {
			recv = append(recv, pps.ReceivedLabel{Pos: pps.PositionOf(s, j), Label: l})
		}
	}
	t0 := time.Now()
	var (
		bad    []pps.Position
		erased []uint32
		err    error
	)
	if len(recv) == 0 {
		return nil
	}
	if e.Checker == contract.CheckOPRF {
		psi := &brokerPSI{g: b.opt.Garbler, fn: f.f.ID, slots: checked}
		bad, err = (&pps.OPRFChecker{Garbler: psi, Rand: b.rand}).Check(ctx, exec, recv)
		erased = psi.erased
	} else {
		bad, erased, err = b.kkrtCheck(ctx, f.f.ID, checked, exec, recv)
	}
	if err != nil {
		return fmt.Errorf("consistency check (%s): %w", e.Checker, err)
	}
	e.Check = time.Since(t0)
	b.m.Latency.WithLabelValues(f.p.Name, "check").Observe(e.Check.Seconds())
	b.m.CheckPositions.WithLabelValues(f.p.Name, "tick").Add(float64(len(recv)))
	for _, s := range erased {
		slots[s].reason = pps.Erased
	}
	for _, s := range pps.BadSlots(bad) {
		if slots[s].reason == pps.Valid {
			slots[s].reason = pps.Inconsistent
		}
	}
	return nil
}

// publishOutput publishes an execution's output on pps.fn.<fnid>.out with the message id of
// (function, tick): a retried publish of the same execution is stored once.
func (b *Broker) publishOutput(ctx context.Context, f *brokerFunction, tick uint64, o *contract.Output) error {
	msg, err := json.Marshal(o)
	if err != nil {
		return err
	}
	id := fmt.Sprintf("pps-out-%s-%d", f.f.ID, tick)
	if err := natsx.Publish(ctx, b.opt.JS, contract.OutSubject(f.f.ID), id, msg, nil); err != nil {
		return fmt.Errorf("publish output: %w", err)
	}
	return nil
}

// release tells the garbler which publisher rounds no execution will ask for again (D8):
// below the latest round this execution used minus the largest window lag any pipeline
// reads the publisher at (a static slot's round stays until a newer value replaces it).
func (b *Broker) release(ctx context.Context, set *brokerSet, f *brokerFunction, slots []schedSlot) {
	keep := map[string]uint64{}
	for s, sl := range slots {
		if sl.reason == pps.NotAllowed || sl.reason == pps.Missing {
			continue
		}
		latest := sl.round
		if f.f.Layout.Slots[s].Source == pps.Window {
			latest += uint64(f.f.Layout.Slots[s].Lag)
		}
		lag := uint64(set.maxLag[sl.pub])
		k := uint64(0)
		if latest > lag {
			k = latest - lag
		}
		if cur, ok := keep[sl.pub]; !ok || k > cur {
			keep[sl.pub] = k
		}
	}
	req := &ppsv1.ReleaseRequest{}
	now := b.clk.Now()
	for pub, k := range keep {
		if k > 0 {
			req.Releases = append(req.Releases, &ppsv1.ReleaseRequest_Release{PubId: pub, BeforeRound: k - 1})
			b.win.forget(pub, k-1, now, set.retention)
		}
	}
	if len(req.Releases) == 0 {
		return
	}
	slices.SortFunc(req.Releases, func(x, y *ppsv1.ReleaseRequest_Release) int { return cmpString(x.PubId, y.PubId) })
	if _, err := b.opt.Garbler.Release(ctx, req); err != nil {
		// The garbler's seed TTL erases them anyway (D8); the next execution releases again.
		b.log.Warn("release rounds", "pipeline", f.p.Name, "err", err)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// brokerPSI carries the consistency check to the garbler (D16a): pps.PSIRequest in,
// pps.PSIResponse out, with the slots' publisher rounds so the garbler can derive the labels.
type brokerPSI struct {
	g      ppsv1.GarblerClient
	fn     string
	slots  []*ppsv1.SlotInput
	erased []uint32
}

func (t *brokerPSI) EvaluatePSI(ctx context.Context, req *pps.PSIRequest) (*pps.PSIResponse, error) {
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := t.g.CheckConsistency(ctx, &ppsv1.CheckConsistencyRequest{FnId: t.fn, Slots: t.slots, PsiRequest: b})
	if err != nil {
		return nil, err
	}
	for _, s := range resp.ErasedSlots {
		if !slices.ContainsFunc(t.slots, func(in *ppsv1.SlotInput) bool { return in.Slot == s }) {
			return nil, fmt.Errorf("garbler reports slot %d erased, which was not checked: %w", s, pps.ErrMalformed)
		}
	}
	t.erased = resp.ErasedSlots
	var out pps.PSIResponse
	if err := out.UnmarshalBinary(resp.PsiResponse); err != nil {
		return nil, err
	}
	return &out, nil
}
