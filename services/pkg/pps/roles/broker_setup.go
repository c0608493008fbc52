package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/natsx"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	ppsv1 "github.com/obscura-iot/obscura/services/proto/obscura/pps/v1"
)

// brokerPermanent reports whether a garbler error is its answer about the request (it will
// not change on a retry) rather than a broken link.
func brokerPermanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.FailedPrecondition, codes.NotFound,
		codes.AlreadyExists, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// handleSetup is the setup relay (spec §3.11, §8.9): a device's signed hello or sub from
// pps.dev.<id>.up goes to the garbler byte for byte, and the garbler's signed answer back on
// pps.dev.<id>.down. The broker decodes the message only to decide: an undecodable one, one
// signed by another device than the subject's, and a subscription the pipeline does not
// list (the ACL, D14) are refused without reaching the garbler.
func (b *Broker) handleSetup(ctx context.Context, m jetstream.Msg) natsx.Outcome {
	id, err := contract.ParseDevUpSubject(m.Subject())
	if err != nil {
		b.m.Rejected.WithLabelValues(stageSetup, reasonSubject).Inc()
		return natsx.Drop
	}
	h, err := contract.DecodeHello(m.Data())
	if err != nil {
		return b.refuseSetup(ctx, id, "", reasonUndecodable, "setup message does not decode or verify")
	}
	if h.DeviceID() != id {
		return b.refuseSetup(ctx, id, h.Fn, reasonDeviceMismatch, "setup message signed by another device than its topic's")
	}
	if h.Type == contract.TypeSub {
		f := b.function(h.Fn)
		if f == nil || !f.subs[id] {
			return b.refuseSetup(ctx, id, h.Fn, reasonACL, "not a subscriber of this function")
		}
		if st, _ := f.state(); st != FunctionRegistered {
			return b.refuseSetup(ctx, id, h.Fn, reasonACL, "function not running")
		}
	}
	resp, err := b.opt.Garbler.Setup(ctx, &ppsv1.SetupRequest{Message: m.Data()})
	if err != nil {
		if brokerPermanent(err) {
			return b.garblerRefused(ctx, id, h.Fn, err)
		}
		b.log.Warn("relay setup to the garbler, retrying", "type", h.Type, "err", err)
		b.m.Setups.WithLabelValues(h.Type, "retry").Inc()
		return natsx.Retry
	}
	down, err := contract.DecodeDown(resp.Message)
	if err != nil || resp.DeviceId != id {
		// The device would discard it anyway; a garbler answering garbage is a bug to see.
		b.log.Error("garbler answered setup with an undecodable message or for another device", "type", h.Type)
		return b.refuseSetup(ctx, id, h.Fn, reasonGarbler, "garbler answer malformed")
	}
	if err := b.down(id, resp.Message); err != nil {
		b.log.Warn("send setup answer, retrying", "err", err)
		return natsx.Retry
	}
	if down.Ack == nil {
		b.m.Setups.WithLabelValues(h.Type, "refused").Inc()
		return natsx.Ack
	}
	switch {
	case h.Type == contract.TypeHello && down.Ack.Type == contract.TypeHelloAck:
		pol := contract.Policy{Fns: resp.PolicyFns, MinInputs: int(resp.PolicyMinInputs)}
		if err := b.store.RegisterPublisher(ctx, id, pol); err != nil {
			b.log.Warn("register publisher, retrying", "err", err)
			return natsx.Retry
		}
		if err := b.notice(id, &contract.Notice{V: contract.Version, Type: contract.TypeRegistered, PubID: id,
			Topic: contract.Topic(contract.PubSubject(id))}); err != nil {
			b.log.Warn("send registered notice, retrying", "err", err)
			return natsx.Retry
		}
	case h.Type == contract.TypeSub && down.Ack.Type == contract.TypeSubAck:
		if err := b.store.AddSubscriber(ctx, h.Fn, id); err != nil {
			b.log.Warn("add subscriber, retrying", "err", err)
			return natsx.Retry
		}
	default:
		b.log.Error("garbler answered setup with an unexpected message type", "type", h.Type, "answer", down.Ack.Type)
		b.m.Setups.WithLabelValues(h.Type, "unexpected").Inc()
		return natsx.Ack
	}
	b.m.Setups.WithLabelValues(h.Type, "accepted").Inc()
	return natsx.Ack
}

// refuseSetup counts a refused setup message and tells the device why (no message body is
// logged: it is the device's).
func (b *Broker) refuseSetup(ctx context.Context, id, fn, reason, text string) natsx.Outcome {
	b.m.Rejected.WithLabelValues(stageSetup, reason).Inc()
	b.log.Info("setup refused", "reason", reason)
	if err := b.notice(id, &contract.Notice{V: contract.Version, Type: contract.TypeRefused, Fn: fn, Reason: text}); err != nil {
		b.log.Warn("send refusal", "err", err)
	}
	return natsx.Drop
}

// garblerRefused relays the garbler's refusal: the "refused" notice it attached to its error
// status, or one of the broker's naming the status code.
func (b *Broker) garblerRefused(ctx context.Context, id, fn string, err error) natsx.Outcome {
	b.m.Rejected.WithLabelValues(stageSetup, reasonGarbler).Inc()
	b.log.Info("setup refused by the garbler", "code", status.Code(err).String())
	for _, d := range status.Convert(err).Details() {
		resp, ok := d.(*ppsv1.SetupResponse)
		if !ok || resp.DeviceId != id {
			continue
		}
		if down, err := contract.DecodeDown(resp.Message); err == nil && down.Notice != nil && down.Notice.Type == contract.TypeRefused {
			if err := b.down(id, resp.Message); err != nil {
				b.log.Warn("send refusal", "err", err)
			}
			return natsx.Drop
		}
	}
	if err := b.notice(id, &contract.Notice{V: contract.Version, Type: contract.TypeRefused, Fn: fn,
		Reason: "garbler refused: " + status.Code(err).String()}); err != nil {
		b.log.Warn("send refusal", "err", err)
	}
	return natsx.Drop
}

func (b *Broker) notice(id string, n *contract.Notice) error {
	msg, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return b.down(id, msg)
}

// down sends a message to a device's down topic. Devices subscribe before sending their
// setup message, so core NATS suffices; the flush makes the send happen before the ack.
func (b *Broker) down(id string, msg []byte) error {
	if err := contract.ValidDeviceID(id); err != nil {
		return err
	}
	if err := b.opt.NC.Publish(contract.DevDownSubject(id), msg); err != nil {
		return fmt.Errorf("publish to device: %w", err)
	}
	return b.opt.NC.Flush()
}

// revokeRemoved revokes, for every registered function, each subscriber in S_C that the
// pipeline no longer lists (D14): the garbler starts a new key epoch and the broker relays
// the new grants to the remaining subscribers. A function whose pipeline was removed
// loses every subscriber: its epoch key then belongs to no one, so if the pipeline comes
// back its old subscribers cannot unmask its outputs.
func (b *Broker) revokeRemoved(ctx context.Context) error {
	var errs []error
	current := map[string]bool{}
	for _, f := range b.current().fns {
		current[f.f.ID] = true
		if st, _ := f.state(); st != FunctionRegistered {
			continue
		}
		subs, err := b.store.Subscribers(ctx, f.f.ID)
		if err == nil && len(subs) > 0 {
			err = b.store.MarkSubscribed(ctx, f.f.ID)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range subs {
			if f.subs[id] {
				continue
			}
			if err := b.revoke(ctx, f.f.ID, f.p.Name, f.subs, func(e uint64) { f.mu.Lock(); f.epoch = e; f.mu.Unlock() }, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	fns, err := b.store.SubscribedFunctions(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, fn := range fns {
		if current[fn] {
			continue
		}
		subs, err := b.store.Subscribers(ctx, fn)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		failed := false
		for _, id := range subs {
			if err := b.revoke(ctx, fn, "(removed)", nil, func(uint64) {}, id); err != nil {
				errs, failed = append(errs, err), true
			}
		}
		if !failed {
			if err := b.store.ForgetSubscribed(ctx, fn); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// revoke revokes subscriber id of function fn (pipeline names it in logs) with the
// garbler and relays the new epoch's grants to the subscribers keep still lists.
func (b *Broker) revoke(ctx context.Context, fn, pipeline string, keep map[string]bool, setEpoch func(uint64), id string) error {
	resp, err := b.opt.Garbler.Revoke(ctx, &ppsv1.RevokeRequest{FnId: fn, DeviceId: id})
	if err != nil && !brokerPermanent(err) {
		b.log.Warn("revoke subscriber, retrying", "pipeline", pipeline, "err", err)
		return err
	}
	epoch := uint64(0)
	if err == nil {
		for _, g := range resp.Regrants {
			if !keep[g.DeviceId] {
				continue // never relay a new epoch to a device the pipeline does not list
			}
			if err := b.down(g.DeviceId, g.Message); err != nil {
				return fmt.Errorf("relay regrant: %w", err)
			}
		}
		epoch = resp.Epoch
		setEpoch(epoch)
	} else {
		b.log.Warn("garbler refused a revocation; dropping the subscriber", "pipeline", pipeline, "code", status.Code(err).String())
	}
	b.m.Revoked.Inc()
	b.log.Info("subscriber revoked", "pipeline", pipeline, "fn", fn, "epoch", epoch)
	return b.store.RemoveSubscriber(ctx, fn, id)
}
