package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/obscura-iot/obscura/services/pkg/clock"
)

// Stream defaults: rounds live for seconds, so a few minutes of retention
// and a de-duplication window that covers every redelivery of a round.
const (
	DefaultMaxAge     = 10 * time.Minute
	DefaultDuplicates = 2 * time.Minute
)

// MaxReplicas is the most replicas JetStream keeps of a stream, bucket or object store.
const MaxReplicas = 5

// replicated is a JetStream context that carries the replica count of what the Ensure
// helpers create through it (WithReplicas).
type replicated struct {
	jetstream.JetStream
	replicas int
}

// WithReplicas returns js carrying the replica count n (1 to MaxReplicas) for every stream,
// key-value bucket and object store that EnsureStream, EnsureKV, EnsureObjectStore and the
// roles' own stream helpers (Replicas) create or update through it: the one place a
// process's replication is set (the daemons' --nats-replicas). A JetStream cluster of three
// nodes runs with 3 so that one node lost loses no acknowledged message; a single server
// takes only 1. n ≤ 1 returns js as it is (one replica, the default).
func WithReplicas(js jetstream.JetStream, n int) jetstream.JetStream {
	if r, ok := js.(replicated); ok {
		js = r.JetStream
	}
	if n <= 1 {
		return js
	}
	return replicated{JetStream: js, replicas: n}
}

// Replicas is the replica count js carries (WithReplicas), 1 without one.
func Replicas(js jetstream.JetStream) int {
	if r, ok := js.(replicated); ok {
		return r.replicas
	}
	return 1
}

// ValidateReplicas checks a replica count setting: 1 to MaxReplicas, odd so that a majority
// of the nodes holding a stream survives as many losses as possible.
func ValidateReplicas(n int) error {
	if n < 1 || n > MaxReplicas || n%2 == 0 {
		return fmt.Errorf("%d replicas: JetStream keeps 1, 3 or 5 (an odd count up to %d, at most the cluster's nodes)", n, MaxReplicas)
	}
	return nil
}

// EnsureStream creates or updates a file-backed stream with de-duplication, replicated as js
// says (WithReplicas).
func EnsureStream(ctx context.Context, js jetstream.JetStream, name string, subjects ...string) (jetstream.Stream, error) {
	return ensureStream(ctx, js, jetstream.FileStorage, DefaultMaxAge, name, subjects)
}

// EnsureKV creates or updates a key-value bucket, replicated as js says (WithReplicas). ttl
// 0 keeps entries.
func EnsureKV(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, jetstream.FileStorage, bucket, ttl)
}

// EnsureObjectStore creates or updates an object store bucket with a TTL, replicated as js
// says (WithReplicas).
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration) (jetstream.ObjectStore, error) {
	return ensureObjectStore(ctx, js, jetstream.FileStorage, bucket, ttl)
}

// ensureStream, ensureKV and ensureObjectStore are the Ensure helpers on either storage.
func ensureStream(ctx context.Context, js jetstream.JetStream, st jetstream.StorageType, maxAge time.Duration, name string, subjects []string) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   subjects,
		Storage:    st,
		MaxAge:     maxAge,
		Duplicates: min(DefaultDuplicates, maxAge),
		MaxMsgSize: 8 << 20,
		Replicas:   Replicas(js),
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, err)
	}
	return s, nil
}

func ensureKV(ctx context.Context, js jetstream.JetStream, st jetstream.StorageType, bucket string, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Storage: st, History: 1,
		Replicas: Replicas(js)})
	if err != nil {
		return nil, fmt.Errorf("ensure kv %s: %w", bucket, err)
	}
	return kv, nil
}

func ensureObjectStore(ctx context.Context, js jetstream.JetStream, st jetstream.StorageType, bucket string, ttl time.Duration) (jetstream.ObjectStore, error) {
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, TTL: ttl, Storage: st,
		Replicas: Replicas(js)})
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", bucket, err)
	}
	return os, nil
}

// PublishAttempt bounds one attempt of Publish: a publish sent to a server that died before
// answering (a killed cluster node) is never answered, and is retried through the
// reconnected connection instead of waiting for the caller's whole deadline.
const PublishAttempt = 2 * time.Second

// Publish publishes with a Nats-Msg-Id so a retried or repeated publish is
// stored once, and retries transient failures with backoff until ctx ends.
// It returns once the stream has acknowledged (the message is durable).
func Publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, data []byte, hdr nats.Header) error {
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	wait := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, PublishAttempt)
		_, err := js.PublishMsg(actx, msg, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish %s: %w", subject, err)
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("publish %s: %w", subject, err)
		}
		if !clock.Sleep(ctx, wait) {
			return fmt.Errorf("publish %s: %w", subject, context.Cause(ctx))
		}
		wait = min(2*wait, time.Second)
	}
}

// Outcome tells Consume what to do with a message after the handler ran.
type Outcome int

const (
	// Ack: the handler's effect is durable.
	Ack Outcome = iota
	// Retry: redeliver later (a transient failure).
	Retry
	// Drop: the message can never be processed (bad input, closed round);
	// it is terminated and counted, never retried.
	Drop
	// Hold: the handler keeps the message and acks it itself later (an
	// encoder holds a round's records until its table is durable).
	Hold
)

// Handler processes one message.
type Handler func(ctx context.Context, m jetstream.Msg) Outcome

// ConsumerSpec describes a durable pull consumer.
type ConsumerSpec struct {
	Stream     string
	Durable    string
	Filters    []string
	AckWait    time.Duration
	MaxAck     int // max ack pending
	Batch      int
	DeliverNew bool
	// ReleaseOnStop NAKs, when Consume stops, every message the handler held (Hold) and has not
	// settled within the ack wait, so another replica gets it at once instead of after the ack
	// wait — a graceful rollout. Only for handlers that settle held messages synchronously
	// (inside a later handler call): a message still being worked on elsewhere must not be
	// released.
	ReleaseOnStop bool
	// Pending, when set, is told after every fetch how many messages of the consumer's filter
	// the server has not delivered yet (the last message's metadata, or the consumer's info
	// after an empty fetch): a work queue's backlog.
	Pending func(n uint64)
}

// Consume runs a durable pull consumer until ctx ends: it (re)creates the
// consumer with backoff when the stream or server is not there yet, fetches
// in batches and settles each message by the handler's outcome. This is the
// one "start JetStream consumer with backoff" helper of the services.
func Consume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, log *slog.Logger, h Handler) error {
	if spec.AckWait == 0 {
		spec.AckWait = 30 * time.Second
	}
	if spec.Batch == 0 {
		spec.Batch = 64
	}
	if spec.MaxAck == 0 {
		spec.MaxAck = 4096
	}
	wait := 50 * time.Millisecond
	held := &heldMsgs{on: spec.ReleaseOnStop, ackWait: spec.AckWait}
	for ctx.Err() == nil {
		cfg := jetstream.ConsumerConfig{
			Durable:           spec.Durable,
			AckPolicy:         jetstream.AckExplicitPolicy,
			AckWait:           spec.AckWait,
			MaxAckPending:     spec.MaxAck,
			FilterSubjects:    spec.Filters,
			InactiveThreshold: time.Hour,
		}
		if spec.DeliverNew {
			cfg.DeliverPolicy = jetstream.DeliverNewPolicy
		}
		if len(spec.Filters) == 1 {
			cfg.FilterSubject, cfg.FilterSubjects = spec.Filters[0], nil
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
		if err != nil {
			log.Warn("consumer not ready, retrying", "stream", spec.Stream, "durable", spec.Durable, "err", err)
			if !clock.Sleep(ctx, wait) {
				break
			}
			wait = min(2*wait, 2*time.Second)
			continue
		}
		wait = 50 * time.Millisecond
		if err := pull(ctx, cons, spec.Batch, h, held, spec.Pending); err != nil && ctx.Err() == nil {
			log.Warn("consumer interrupted, restarting", "durable", spec.Durable, "err", err)
			if !clock.Sleep(ctx, wait) {
				break
			}
		}
	}
	if spec.ReleaseOnStop {
		if n := held.release(); n > 0 {
			log.Info("released held messages for another replica", "durable", spec.Durable, "messages", n)
		}
	}
	return nil
}

// heldMsgs remembers the messages a handler held, for ReleaseOnStop.
type heldMsgs struct {
	on      bool
	ackWait time.Duration
	msgs    []heldMsg
}

type heldMsg struct {
	m  jetstream.Msg
	at time.Time
}

func (h *heldMsgs) add(m jetstream.Msg) {
	if !h.on {
		return
	}
	now := time.Now()
	if len(h.msgs)%256 == 255 {
		// Past the ack wait a held message has been redelivered anyway: forget it.
		keep := h.msgs[:0]
		for _, x := range h.msgs {
			if now.Sub(x.at) < h.ackWait {
				keep = append(keep, x)
			}
		}
		h.msgs = keep
	}
	h.msgs = append(h.msgs, heldMsg{m: m, at: now})
}

// release NAKs the held messages still within the ack wait; settled ones answer
// ErrMsgAlreadyAckd locally and are not counted.
func (h *heldMsgs) release() int {
	n := 0
	for _, x := range h.msgs {
		if time.Since(x.at) < h.ackWait && x.m.Nak() == nil {
			n++
		}
	}
	h.msgs = nil
	return n
}

func pull(ctx context.Context, cons jetstream.Consumer, batch int, h Handler, held *heldMsgs, pending func(uint64)) error {
	for ctx.Err() == nil {
		b, err := cons.Fetch(batch, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		var last jetstream.Msg
		for m := range b.Messages() {
			last = m
			o := h(ctx, m)
			if o == Hold {
				held.add(m)
			}
			settle(ctx, m, o)
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if pending != nil {
			reportPending(ctx, cons, last, pending)
		}
	}
	return nil
}

// reportPending tells pending the consumer's undelivered messages: free from the last
// message's metadata, one consumer info request after an empty fetch.
func reportPending(ctx context.Context, cons jetstream.Consumer, last jetstream.Msg, pending func(uint64)) {
	if last != nil {
		if md, err := last.Metadata(); err == nil {
			pending(md.NumPending)
			return
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if info, err := cons.Info(ictx); err == nil {
		pending(info.NumPending)
	}
}

func settle(ctx context.Context, m jetstream.Msg, o Outcome) {
	switch o {
	case Ack:
		_ = m.DoubleAck(ctx)
	case Retry:
		_ = m.NakWithDelay(200 * time.Millisecond)
	case Drop:
		_ = m.Term()
	case Hold:
	}
}

// Consumer is one consumer of a role that runs several (ConsumeAll).
type Consumer struct {
	Spec    ConsumerSpec
	Handler Handler
}

// ConsumeAll runs every consumer (Consume) until ctx ends or one of them fails, which stops
// the others; it returns every consumer's error, none dropped.
func ConsumeAll(ctx context.Context, js jetstream.JetStream, log *slog.Logger, cs ...Consumer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = Consume(ctx, js, c.Spec, log, c.Handler); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
