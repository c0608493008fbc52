package roles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/gc"
	"github.com/obscura-iot/obscura/services/pkg/ot"
	"github.com/obscura-iot/obscura/services/pkg/pps"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// brokerOT is this broker replica's OT-extension session with the garbler for the hardened
// mode H1 (D21): the broker is the receiver. One session per (replica, garbler) link, set up
// by OTSetup on first use. IKNP's batches run strictly in order, so the H1 executions of a
// replica are serialised on mu from the OT request until the garbler's reply has become
// evaluator labels (the rest of the garbled stream is evaluated unlocked, in parallel with
// other executions). After any failure between the request and the reply the two sides may
// no longer be at the same offset, so the session is dropped and the next execution sets up
// a fresh one; a garbler that no longer holds the session (restart, eviction) answers
// ABORTED, and the execution sets up again and retries once.
type brokerOT struct {
	mu     sync.Mutex
	r      *ot.Receiver // nil: no session
	setups int          // OTSetup round trips run, for tests and logs
}

// setup runs the base OTs with the garbler. Called with mu held.
func (o *brokerOT) setup(ctx context.Context, g ppsv1.GarblerClient) error {
	r, setup, err := ot.NewReceiver(nil)
	if err != nil {
		return err
	}
	b, err := setup.MarshalBinary()
	if err != nil {
		return err
	}
	resp, err := g.OTSetup(ctx, &ppsv1.OTSetupRequest{Setup: b})
	if err != nil {
		return fmt.Errorf("ot setup: %w", err)
	}
	var reply ot.SetupReply
	if err := reply.UnmarshalBinary(resp.GetSetupReply()); err != nil {
		return fmt.Errorf("ot setup: %w", err)
	}
	if err := r.Finish(&reply); err != nil {
		return fmt.Errorf("ot setup: %w", err)
	}
	o.r = r
	o.setups++
	return nil
}

// hardenedGarble starts an H1 execution on the garbler: it builds the OT request from the
// valid slots' masked values (pps.HardenedRequest), sends it with req, and turns the
// header's OT reply into the evaluator's labels. It returns the stream positioned after the
// header.
func (b *Broker) hardenedGarble(ctx context.Context, a *pps.Assignment, masked func(int) (uint32, bool), req *ppsv1.GarbleRequest) (grpc.ServerStreamingClient[ppsv1.GarbleResponse], *ppsv1.GarbleHeader, []gc.Label, error) {
	o := &b.ot
	o.mu.Lock()
	defer o.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if o.r == nil {
			if err := o.setup(ctx, b.opt.Garbler); err != nil {
				return nil, nil, nil, err
			}
			b.log.Info("OT session set up with the garbler", "setups", o.setups)
		}
		stream, hdr, labels, err := b.hardenedAttempt(ctx, a, masked, req)
		if err == nil {
			return stream, hdr, labels, nil
		}
		o.r = nil // the two sides' offsets may differ now
		if status.Code(err) == codes.Aborted && attempt == 0 {
			b.log.Info("garbler does not hold the OT session, setting up again", "err", err)
			continue
		}
		return nil, nil, nil, err
	}
}

func (b *Broker) hardenedAttempt(ctx context.Context, a *pps.Assignment, masked func(int) (uint32, bool), req *ppsv1.GarbleRequest) (grpc.ServerStreamingClient[ppsv1.GarbleResponse], *ppsv1.GarbleHeader, []gc.Label, error) {
	otReq, ev, err := pps.HardenedRequest(a, masked, b.ot.r)
	if err != nil {
		return nil, nil, nil, err
	}
	if req.OtRequest, err = otReq.MarshalBinary(); err != nil {
		return nil, nil, nil, err
	}
	stream, hdr, err := b.garbleHeader(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	var reply ot.CorrelatedReply
	if err := reply.UnmarshalBinary(hdr.GetOtResponse()); err != nil {
		return nil, nil, nil, fmt.Errorf("garble: OT response: %w", err)
	}
	labels, err := ev.EvaluatorLabels(&reply)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("garble: %w", err)
	}
	return stream, hdr, labels, nil
}

// garbleHeader calls Garble, its data messages decoded by a chunkCodec, and reads the
// stream's header.
func (b *Broker) garbleHeader(ctx context.Context, req *ppsv1.GarbleRequest) (grpc.ServerStreamingClient[ppsv1.GarbleResponse], *ppsv1.GarbleHeader, error) {
	codec := &chunkCodec{}
	call, err := b.opt.Garbler.Garble(ctx, req, codec.callOption())
	if err != nil {
		return nil, nil, fmt.Errorf("garble: %w", err)
	}
	stream := &codecStream[ppsv1.GarbleResponse]{call, codec}
	first, err := stream.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("garble: %w", err)
	}
	hdr := first.GetHeader()
	if hdr == nil {
		codec.release()
		return nil, nil, errors.New("garble: stream does not start with a header")
	}
	return stream, hdr, nil
}

// OTSetups is the number of OT-extension sessions this broker has set up with the garbler
// (H1, D21).
func (b *Broker) OTSetups() int {
	b.ot.mu.Lock()
	defer b.ot.mu.Unlock()
	return b.ot.setups
}

// brokerKKRT carries the KKRT consistency check (D16b) to the garbler for the replica's
// pps.KKRTChecker: SetupKKRT once per session, EvaluateKKRT per check. The function and the
// slots' publisher rounds of a check travel in its context (kkrtCall), since the checker's
// transport interface carries the protocol messages only.
type brokerKKRT struct {
	g      ppsv1.GarblerClient
	setups atomic.Int64 // SetupKKRT round trips that succeeded
}

// kkrtCall is one check's function, slots, and (filled in by EvaluateKKRT) the slots the
// garbler reports erased.
type kkrtCall struct {
	fn     string
	slots  []*ppsv1.SlotInput
	erased []uint32
}

type kkrtCallKey struct{}

func (t *brokerKKRT) SetupKKRT(ctx context.Context, m *ot.KKRTSetup) (*ot.KKRTSetupReply, error) {
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := t.g.SetupKKRT(ctx, &ppsv1.SetupKKRTRequest{Setup: b})
	if err != nil {
		return nil, err
	}
	var reply ot.KKRTSetupReply
	if err := reply.UnmarshalBinary(resp.GetSetupReply()); err != nil {
		return nil, err
	}
	t.setups.Add(1)
	return &reply, nil
}

func (t *brokerKKRT) EvaluateKKRT(ctx context.Context, req *pps.KKRTCheckRequest) (*pps.KKRTCheckResponse, error) {
	call, ok := ctx.Value(kkrtCallKey{}).(*kkrtCall)
	if !ok {
		return nil, errors.New("kkrt check without its function and slots")
	}
	b, err := req.MarshalBinary()
	if err != nil {
		return nil, err
	}
	resp, err := t.g.EvaluateKKRT(ctx, &ppsv1.EvaluateKKRTRequest{FnId: call.fn, Slots: call.slots, KkrtRequest: b})
	if err != nil {
		return nil, err
	}
	for _, s := range resp.ErasedSlots {
		if !slices.ContainsFunc(call.slots, func(in *ppsv1.SlotInput) bool { return in.Slot == s }) {
			return nil, fmt.Errorf("garbler reports slot %d erased, which was not checked: %w", s, pps.ErrMalformed)
		}
	}
	call.erased = resp.ErasedSlots
	var out pps.KKRTCheckResponse
	if err := out.UnmarshalBinary(resp.KkrtResponse); err != nil {
		return nil, err
	}
	return &out, nil
}

// kkrtCheck runs one KKRT check of fn over recv. A garbler that no longer holds the session
// (restart, eviction, idle expiry) answers ABORTED; the checker has then dropped its side,
// and the check runs once more over a new session.
func (b *Broker) kkrtCheck(ctx context.Context, fn string, checked []*ppsv1.SlotInput, exec pps.ExecID, recv []pps.ReceivedLabel) (bad []pps.Position, erased []uint32, err error) {
	for attempt := 0; ; attempt++ {
		call := &kkrtCall{fn: fn, slots: checked}
		bad, err = b.kkrt.Check(context.WithValue(ctx, kkrtCallKey{}, call), exec, recv)
		if err == nil {
			return bad, call.erased, nil
		}
		if status.Code(err) == codes.Aborted && attempt == 0 {
			b.log.Info("garbler does not hold the KKRT session, setting up again", "err", err)
			continue
		}
		return nil, nil, err
	}
}

// KKRTSetups is the number of KKRT consistency-check sessions this broker has set up with
// the garbler (D16b).
func (b *Broker) KKRTSetups() int { return int(b.kkrtT.setups.Load()) }
