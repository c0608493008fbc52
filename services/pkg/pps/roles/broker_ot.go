package roles

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// garbleHeader calls Garble and reads the stream's header.
func (b *Broker) garbleHeader(ctx context.Context, req *ppsv1.GarbleRequest) (grpc.ServerStreamingClient[ppsv1.GarbleResponse], *ppsv1.GarbleHeader, error) {
	stream, err := b.opt.Garbler.Garble(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("garble: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, nil, fmt.Errorf("garble: %w", err)
	}
	hdr := first.GetHeader()
	if hdr == nil {
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
