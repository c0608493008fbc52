// Package client holds the Mohito user and device clients (spec §3.6 C1,
// C7, §3.7 R1, R5). A User submits fixed-size M1 envelopes to a gateway over
// gRPC, retries into the next round when a round is closed or aborted (spec
// O3, G7) and fetches its response from its mailbox. A Device receives one
// M6 per round from its vendor — over NATS or MQTT — and answers every slot,
// with random bytes when it had no command, through the same path.
package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/obscura-iot/obscura/services/pkg/clock"
	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// ErrGaveUp means the command was not answered within the client's budget.
var ErrGaveUp = errors.New("client: no response within the deadline")

// User is one user with an access token.
type User struct {
	Name string
	GW   *GatewayClient
	// Poll is the polling interval of the fallback only — a gateway that neither holds
	// Fetch nor pushes rounds (default 250 ms). Responses and rounds are otherwise pushed:
	// Fetch is a long-poll of up to Wait, and rounds arrive on the Rounds stream.
	Poll time.Duration
	// Wait is how long one Fetch may be held by the gateway (default 15 s, under the
	// gateway's 20 s cap and the edge's 30 s route timeout).
	Wait time.Duration

	mu    sync.Mutex
	slots map[slotKey]uint32 // slots j taken per (round, device)
}

// slotKey is one device in one round: the user's commands to it in that round
// take the slots j = 1..q in turn (their ids z differ, so they never collide).
type slotKey struct {
	t   uint64
	dev [mohito.KeySize]byte
}

// claimSlot returns the next free slot j of dev in round t, or 0 when all q
// are taken (the command waits for the next round).
func (u *User) claimSlot(t uint64, dev *mohito.DeviceCredentials, q int) uint32 {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.slots == nil {
		u.slots = map[slotKey]uint32{}
	}
	k := slotKey{t: t, dev: dev.Keys.PRF}
	if int(u.slots[k]) >= q {
		return 0
	}
	u.slots[k]++
	// Forget rounds long past: a user only submits to the current one.
	for old := range u.slots {
		if old.t+8 < t {
			delete(u.slots, old)
		}
	}
	return u.slots[k]
}

// Defaults of User.
const (
	DefaultPoll = 250 * time.Millisecond
	DefaultWait = 15 * time.Second
)

// Result describes one answered command.
type Result struct {
	Response []byte
	T        uint64 // the round that carried it
	Attempts int    // rounds tried (1 + retries)
	// Unopened counts the attempts whose response did not open: random bytes because the
	// device was not active when its round was decoded (spec O11), or an answer lost on the
	// way. The command was re-sent; a device never executes it twice.
	Unopened int
	Latency  time.Duration
}

// Send issues payload to the device and waits for its response, retrying in
// a later round whenever the round is closed, over quota or aborted, or its
// response does not open (spec O11). The device executes it once however
// many rounds it takes.
func (u *User) Send(ctx context.Context, dev *mohito.DeviceCredentials, payload []byte) (*Result, error) {
	start := time.Now()
	poll, wait := u.Poll, u.Wait
	if poll <= 0 {
		poll = DefaultPoll
	}
	if wait <= 0 {
		wait = DefaultWait
	}
	// A request refused with ResourceExhausted by a rate limit in front of the gateway (the
	// edge's per-client limit) backs off, up to a second, until one passes.
	var limited time.Duration
	backoff := func(err error) time.Duration {
		if status.Code(err) != codes.ResourceExhausted {
			limited = 0
			return poll
		}
		limited = min(max(2*limited, 4*poll), time.Second)
		return limited
	}
	// Every attempt carries the same command id and issue time, so a device
	// that executed the command in a round that was then aborted answers the
	// retry from memory instead of executing it again: exactly once.
	id, err := mohito.NewCommandID(rand.Reader)
	if err != nil {
		return nil, err
	}
	issued := time.Now()
	var lastT uint64
	var unopened int
	var openErr error
	for attempt := 1; ctx.Err() == nil; attempt++ {
		// The current round, pushed on the Rounds stream (no call per command); after a
		// closed, full or aborted round, the next one.
		ri, err := u.GW.NextRound(ctx, lastT, poll)
		if err != nil {
			break
		}
		j := u.claimSlot(ri.T, dev, ri.Params.Q)
		if j == 0 {
			// Every slot of this device is taken this round by the user's other commands.
			lastT = ri.T
			attempt--
			continue
		}
		chosen := time.Now()
		m1, pc, err := mohito.IssueCommandID(ri, dev, j, id, payload, issued, rand.Reader)
		if err != nil {
			return nil, err
		}
		t, idx, err := u.GW.Submit(ctx, m1)
		u.GW.rounds.observeSubmit(time.Since(chosen))
		if err != nil {
			switch status.Code(err) {
			case codes.FailedPrecondition, codes.ResourceExhausted, codes.Unavailable:
				// Closed, over q (or the edge's limit) or unavailable: the next round.
				if status.Code(err) == codes.FailedPrecondition {
					// The round closed before its successor reached this client's Rounds
					// stream (rounds are pipelined: t+1 opens as t closes). The refusal's
					// trailer carries the current round; without it, ask once rather than
					// wait for the push, which lags on a loaded client.
					u.GW.refreshRound(ctx, ri.T)
				}
				lastT = ri.T
				attempt--
				continue
			}
			return nil, fmt.Errorf("submit: %w", err)
		}
		lastT = t
		for ctx.Err() == nil {
			// A long-poll: answered the moment round t's responses are released.
			m11, err := u.GW.FetchWait(ctx, t, idx, wait)
			if err == nil {
				resp, err := pc.OpenResponse(m11)
				if err != nil {
					unopened, openErr = unopened+1, err
					break
				}
				return &Result{Response: resp, T: t, Attempts: attempt, Unopened: unopened, Latency: time.Since(start)}, nil
			}
			code := status.Code(err)
			if code == codes.Aborted {
				break
			}
			if code == codes.DeadlineExceeded {
				continue // the gateway's wait passed first: ask again at once
			}
			// NotFound at once: a gateway that does not hold calls (fallback poll);
			// ResourceExhausted: the edge's limit; anything else: retry after a pause.
			if !clock.Sleep(ctx, backoff(err)) {
				break
			}
		}
	}
	if openErr != nil {
		return nil, fmt.Errorf("%w: %v; %d responses did not open, the last: %v", ErrGaveUp, context.Cause(ctx), unopened, openErr)
	}
	return nil, fmt.Errorf("%w: %v", ErrGaveUp, context.Cause(ctx))
}

// Transport is a device's connection to its vendor: NATS or MQTT.
type Transport interface {
	Subscribe(topic string, h func([]byte)) error
	Publish(topic string, b []byte) error
	Close()
}

// Handler executes a command and returns the response payload.
type Handler func(cmd *mohito.Command) []byte

// Device is one device.
type Device struct {
	ID string
	mu sync.Mutex
	d  *mohito.Device
	tr Transport
	h  Handler
	// Received counts M6 messages; Commands counts commands executed.
	Received, Commands int
	// Late counts rounds answered after the fixed offset because executing
	// took longer: each such answer may miss the vendor's release.
	Late int
	// AnswerAfter is when the device answers after a delivery, whatever it
	// executed (spec G7): set before Start; [DefaultAnswerAfter] by default.
	// It must agree with the vendor's deployment (its deviceAnswerAfter).
	AnswerAfter time.Duration
	// off: the device is switched off or out of reach; rounds pass it by.
	off bool
}

// DefaultAnswerAfter is a device's answer offset unless set otherwise: a
// quarter of a 1 s response deadline.
const DefaultAnswerAfter = 250 * time.Millisecond

// SetOff switches the device off (true) or on again. While off it neither
// opens nor answers the rounds its vendor sends: the vendor fills its slots
// with random values (spec O11), the users of its commands get responses
// that do not open and re-send them, and the device executes each once when
// it is back.
func (d *Device) SetOff(off bool) {
	d.mu.Lock()
	d.off = off
	d.mu.Unlock()
}

// NewDevice returns a device with secret s speaking over tr.
func NewDevice(id string, s *mohito.DeviceSecret, p mohito.Params, tr Transport, h Handler) *Device {
	return &Device{ID: id, d: mohito.NewDevice(s, p, 5*time.Minute), tr: tr, h: h, AnswerAfter: DefaultAnswerAfter}
}

// Start subscribes to the device's command subject.
func (d *Device) Start() error {
	return d.tr.Subscribe(contract.DeviceCommandSubject(d.ID), d.onDelivery)
}

// onDelivery answers every slot of every round through one code path
// (spec R1: dummy responses take the same path as real ones), at the fixed
// offset AnswerAfter after the delivery whatever it executed (spec G7):
// answering "as soon as executed" told the vendor, and anyone who sees its
// traffic, which devices had a real command.
func (d *Device) onDelivery(m6 []byte) {
	at := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return
	}
	t, slots, err := d.d.ReceiveCommands(m6, at)
	if err != nil {
		return
	}
	d.Received++
	payloads := make([][]byte, len(slots))
	for j, s := range slots {
		if s.Command != nil && !s.Repeat {
			d.Commands++
			payloads[j] = d.h(s.Command)
		}
	}
	m7, err := d.d.Respond(t, slots, payloads, rand.Reader)
	if err != nil {
		return
	}
	publish := func() { _ = d.tr.Publish(contract.DeviceResponseSubject(d.ID), m7) }
	wait := time.Until(at.Add(d.AnswerAfter))
	if wait <= 0 {
		if d.AnswerAfter > 0 {
			d.Late++
		}
		publish()
		return
	}
	time.AfterFunc(wait, publish)
}

// Stats returns (M6 received, commands executed).
func (d *Device) Stats() (int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Received, d.Commands
}
