package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/pkg/pps/dsl"
)

// SubscriberOptions configure a Subscriber.
type SubscriberOptions struct {
	Options
	// Retain is how many past function rounds a feed can still unmask when outputs arrive
	// out of order; zero means 16.
	Retain int
	// RegrantWait is how long Next waits for the grant of a newer key epoch when an output
	// masked under it arrives first (the regrant and the output travel on different topics);
	// after it, Next returns pps.ErrEpoch: the subscriber was revoked. Zero means 10 s.
	RegrantWait time.Duration
	// Queue bounds the outputs buffered per function; zero means 256. Outputs beyond it are
	// dropped and counted (Stats).
	Queue int
}

// Subscriber is a PPS subscriber (spec §2.1, §8.7, §8.9): for each function it subscribes
// to, a signed "sub" handshake with the garbler yields the function key grant, and outputs
// on pps/fn/<fnid>/out are unmasked with it. It keeps each function's handshake session so
// that the garbler's "regrant" — a new key epoch after another subscriber is revoked (D14) —
// installs without a new handshake. Nothing is persisted: a restarted subscriber subscribes
// again and is granted the current key, unmasking outputs from then on.
type Subscriber struct {
	dev  Device
	opt  SubscriberOptions
	cn   *conn
	down *downInbox

	mu      sync.Mutex
	feeds   map[string]*Feed
	pending map[string]chan *contract.Down // fn → the handshake waiting for its answer

	stats struct{ malformed, tampered, dropped, replayed atomic.Uint64 }
	done  chan struct{}
	once  sync.Once
}

// Stats counts the messages a subscriber rejected, by reason.
type Stats struct {
	// Malformed outputs and down messages (they did not decode, or named another function).
	Malformed uint64
	// Tampered regrants (not signed by the pinned garbler, or not opening).
	Tampered uint64
	// Dropped outputs and down messages (queue full).
	Dropped uint64
	// Replayed outputs (an execution already delivered).
	Replayed uint64
}

// DialSubscriber connects a subscriber to the MQTT listener and subscribes to its down topic.
// The session is clean: a restarted subscriber is granted the key from the next unallocated
// function round on, so outputs queued while it was away could not be opened anyway.
func DialSubscriber(ctx context.Context, d Device, o SubscriberOptions) (*Subscriber, error) {
	if o.Retain == 0 {
		o.Retain = 16
	}
	if o.RegrantWait == 0 {
		o.RegrantWait = 10 * time.Second
	}
	if o.Queue == 0 {
		o.Queue = 256
	}
	if o.Retain < 0 || o.RegrantWait < 0 || o.Queue < 0 {
		return nil, fmt.Errorf("retain %d, regrant wait %s, queue %d: %w", o.Retain, o.RegrantWait, o.Queue, ErrConfig)
	}
	cn, err := dial(ctx, &d, "sub", o.Options)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{dev: d, opt: o, cn: cn, down: newDownInbox(), feeds: map[string]*Feed{},
		pending: map[string]chan *contract.Down{}, done: make(chan struct{})}
	if err := cn.subscribe(ctx, contract.Topic(contract.DevDownSubject(d.ID())), s.down.put); err != nil {
		cn.close()
		return nil, fmt.Errorf("subscribe to the down topic: %w", err)
	}
	go s.route()
	return s, nil
}

// ID is the subscriber's device id.
func (s *Subscriber) ID() string { return s.dev.ID() }

// Stats returns the rejection counters.
func (s *Subscriber) Stats() Stats {
	return Stats{Malformed: s.stats.malformed.Load(), Tampered: s.stats.tampered.Load(),
		Dropped: s.stats.dropped.Load() + s.down.dropped.Load(), Replayed: s.stats.replayed.Load()}
}

// Close disconnects and erases every function key and session.
func (s *Subscriber) Close() {
	s.once.Do(func() { close(s.done) })
	s.cn.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.feeds {
		f.zero()
	}
}

// route reads the down topic: answers to a pending handshake go to it, regrants to their feed.
func (s *Subscriber) route() {
	for {
		var b []byte
		select {
		case b = <-s.down.ch:
		case <-s.done:
			return
		case <-s.cn.lost:
			return
		}
		d, err := contract.DecodeDown(b)
		if err != nil {
			s.stats.malformed.Add(1)
			continue
		}
		fn := ""
		switch {
		case d.Ack != nil:
			fn = d.Ack.Fn
		case d.Notice != nil:
			fn = d.Notice.Fn
		}
		s.mu.Lock()
		wait, isPending := s.pending[fn]
		feed := s.feeds[fn]
		s.mu.Unlock()
		switch {
		case isPending && (d.Notice != nil || d.Ack.Type == contract.TypeSubAck):
			// Only a sub-ack or a refusal answers a handshake; a regrant that crosses it
			// belongs to an earlier session.
			select {
			case wait <- d:
			default: // the handshake already has its answer
			}
		case feed != nil && d.Ack != nil && d.Ack.Type == contract.TypeRegrant:
			if err := feed.regrant(d.Ack); err != nil {
				s.stats.tampered.Add(1)
			}
		default:
			s.stats.malformed.Add(1)
		}
	}
}

// Subscribe runs the subscriber handshake for fn (spec §8.9): a signed "sub" on the device's
// up topic, the garbler's sub-ack validated under the pinned key, its grant opened with the
// session key and bound to fn, the device key and the hello's transcript. It then subscribes
// to the function's output topic and returns the feed of its outputs. A refusal is
// ErrRefused, an answer not from the pinned garbler ErrTampered.
func (s *Subscriber) Subscribe(ctx context.Context, fn *dsl.Function) (*Feed, error) {
	if err := contract.ValidFnID(fn.ID); err != nil {
		return nil, fmt.Errorf("subscribe: %v: %w", err, ErrConfig)
	}
	s.mu.Lock()
	if s.feeds[fn.ID] != nil || s.pending[fn.ID] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("already subscribed to %s: %w", fn.ID, ErrConfig)
	}
	answer := make(chan *contract.Down, 1)
	s.pending[fn.ID] = answer
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, fn.ID)
		s.mu.Unlock()
	}()

	hs, err := newHandshake(&s.dev, contract.TypeSub, fn.ID, nil)
	if err != nil {
		return nil, err
	}
	if err := s.cn.publish(ctx, contract.Topic(contract.DevUpSubject(s.ID())), hs.raw); err != nil {
		return nil, fmt.Errorf("send sub: %w", err)
	}
	var d *contract.Down
	select {
	case d = <-answer:
	case <-s.cn.lost:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("subscribe to %s: %w", fn.ID, ctx.Err())
	}
	switch {
	case d.Notice != nil && d.Notice.Type == contract.TypeRefused:
		return nil, refused(d.Notice)
	case d.Ack == nil || d.Ack.Type != contract.TypeSubAck:
		return nil, fmt.Errorf("answer to sub is %s, want %s: %w", typeOf(d), contract.TypeSubAck, ErrTampered)
	}
	keys, err := hs.keys(d.Ack, s.dev.Garbler)
	if err != nil {
		return nil, err
	}
	f := &Feed{fn: fn, sub: s, hello: hs.hello, keys: keys,
		ad:       contract.GrantAD(fn.ID, hs.hello.EdPK, hs.hello.Transcript()),
		keyring:  pps.NewSubscription(s.opt.Retain),
		out:      make(chan []byte, s.opt.Queue),
		regrants: make(chan struct{}),
		seen:     map[string]bool{},
	}
	if err := f.accept(d.Ack.Grant); err != nil {
		f.zero()
		return nil, err
	}
	s.mu.Lock()
	s.feeds[fn.ID] = f
	s.mu.Unlock()
	if err := s.cn.subscribe(ctx, contract.Topic(contract.OutSubject(fn.ID)), f.put); err != nil {
		s.mu.Lock()
		delete(s.feeds, fn.ID)
		s.mu.Unlock()
		f.zero()
		return nil, fmt.Errorf("subscribe to the outputs of %s: %w", fn.ID, err)
	}
	return f, nil
}

func typeOf(d *contract.Down) string {
	if d.Ack != nil {
		return d.Ack.Type
	}
	return d.Notice.Type
}

// Output is one execution's result as the subscriber sees it.
type Output struct {
	Fn    string
	Exec  string
	Round uint64
	Epoch uint64
	// Valid is the number of valid input slots the broker reports.
	Valid int
	// Insufficient is the ideal functionality's ⊥ (spec §2.4 step 6, §8.6): too few valid
	// inputs; Values is nil.
	Insufficient bool
	// Values are the function's outputs in schema order: Q24.8 values, and comparison bits as
	// 0 or 1 (dsl.Function.Decode).
	Values []pps.Fixed
	// Kinds is the output schema.
	Kinds []dsl.OutputKind
}

// Floats are the outputs as real numbers: a Q24.8 value's value, a bit's 0 or 1.
func (o *Output) Floats() []float64 {
	out := make([]float64, len(o.Values))
	for i, v := range o.Values {
		if o.Kinds[i] == dsl.BitOutput {
			out[i] = float64(v)
		} else {
			out[i] = v.Float64()
		}
	}
	return out
}

// Feed is one function subscription: its key epochs and its queue of outputs.
type Feed struct {
	fn    *dsl.Function
	sub   *Subscriber
	hello *contract.Hello
	ad    []byte
	out   chan []byte

	mu       sync.Mutex
	keys     pps.SessionKeys // kept for regrants sealed under this session
	keyring  *pps.Subscription
	epoch    uint64
	regrants chan struct{} // closed and replaced on every new epoch
	seen     map[string]bool
	seenFIFO []string
}

// Fn is the function id.
func (f *Feed) Fn() string { return f.fn.ID }

// Epoch is the newest key epoch the feed holds.
func (f *Feed) Epoch() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

func (f *Feed) put(b []byte) {
	select {
	case f.out <- append([]byte(nil), b...):
	default:
		f.sub.stats.dropped.Add(1)
	}
}

// accept opens a sealed grant of this session and installs it.
func (f *Feed) accept(sealed []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := pps.OpenGrant(&f.keys, sealed, f.ad)
	if err != nil {
		return fmt.Errorf("grant for %s: %v: %w", f.fn.ID, err, ErrTampered)
	}
	epoch := g.Epoch
	if err := f.keyring.Accept(&g); err != nil {
		return fmt.Errorf("grant for %s: %w", f.fn.ID, err)
	}
	f.epoch = max(f.epoch, epoch)
	close(f.regrants)
	f.regrants = make(chan struct{})
	return nil
}

// regrant installs a "regrant" (D14) after checking it is the pinned garbler's answer to
// this feed's handshake.
func (f *Feed) regrant(a *contract.Ack) error {
	if err := a.Validate(f.hello, f.sub.dev.Garbler); err != nil {
		return fmt.Errorf("regrant: %v: %w", err, ErrTampered)
	}
	return f.accept(a.Grant)
}

func (f *Feed) zero() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys.Zero()
	f.keyring = pps.NewSubscription(0) // drops the ratchets; their keys are unreachable
}

// Next returns the next output of the function, unmasked (spec §8.7). Outputs that do not
// decode, name another function or repeat an execution are dropped and counted (Stats). An
// output masked under an epoch newer than the feed holds waits up to RegrantWait for its
// regrant; without one, Next returns an error wrapping pps.ErrEpoch (the subscriber was
// revoked).
func (f *Feed) Next(ctx context.Context) (*Output, error) {
	for {
		var b []byte
		select {
		case b = <-f.out:
		case <-f.sub.done:
			return nil, ErrClosed
		case <-f.sub.cn.lost:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		o, err := f.open(ctx, b)
		switch {
		case err == nil:
			return o, nil
		case errors.Is(err, errSkip):
			continue
		default:
			return nil, err
		}
	}
}

// errSkip marks an output that is dropped rather than returned.
var errSkip = errors.New("skip")

func (f *Feed) open(ctx context.Context, b []byte) (*Output, error) {
	o, err := contract.DecodeOutput(b)
	if err != nil || o.Fn != f.fn.ID {
		f.sub.stats.malformed.Add(1)
		return nil, errSkip
	}
	f.mu.Lock()
	replay := f.seen[o.Exec]
	if !replay {
		f.seen[o.Exec] = true
		f.seenFIFO = append(f.seenFIFO, o.Exec)
		if len(f.seenFIFO) > 4096 {
			delete(f.seen, f.seenFIFO[0])
			f.seenFIFO = f.seenFIFO[1:]
		}
	}
	f.mu.Unlock()
	if replay {
		f.sub.stats.replayed.Add(1)
		return nil, errSkip
	}
	out := &Output{Fn: o.Fn, Exec: o.Exec, Round: o.Round, Epoch: o.Epoch, Valid: o.Valid, Kinds: f.fn.Outputs}
	if o.Status == contract.StatusInsufficient {
		out.Insufficient = true
		return out, nil
	}
	if o.Bits != f.fn.OutputBits() {
		f.sub.stats.malformed.Add(1)
		return nil, errSkip
	}
	plain, err := f.unmask(ctx, o)
	if err != nil {
		return nil, err
	}
	if out.Values, err = f.fn.Decode(plain); err != nil {
		f.sub.stats.malformed.Add(1)
		return nil, errSkip
	}
	clear(plain)
	return out, nil
}

// unmask opens o, waiting for a regrant when o is of a newer epoch than the feed holds.
func (f *Feed) unmask(ctx context.Context, o *contract.Output) ([]byte, error) {
	var timer <-chan time.Time
	for {
		f.mu.Lock()
		plain, err := f.keyring.Unmask(o.Epoch, o.Round, o.Masked, o.Bits)
		newer, regranted := o.Epoch > f.epoch, f.regrants
		f.mu.Unlock()
		switch {
		case err == nil:
			return plain, nil
		case errors.Is(err, pps.ErrEpoch) && newer:
			if timer == nil {
				t := time.NewTimer(f.sub.opt.RegrantWait)
				defer t.Stop()
				timer = t.C
			}
			select {
			case <-regranted:
				continue
			case <-timer:
				return nil, fmt.Errorf("output of %s at epoch %d round %d, no regrant: %w", f.fn.ID, o.Epoch, o.Round, err)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		default:
			// An epoch older than the two held, an erased round (older than Retain) or a
			// malformed mask: nothing to unmask.
			f.sub.stats.malformed.Add(1)
			return nil, errSkip
		}
	}
}
