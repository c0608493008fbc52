package client

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/obscura-iot/obscura/services/pkg/pps"
	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
)

var (
	// ErrNotSetUp: Publish before Setup or Restore.
	ErrNotSetUp = errors.New("pps client: publisher not set up")
	// ErrState: a ratchet state that does not decode, or belongs to another device.
	ErrState = errors.New("pps client: invalid publisher state")
)

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	Options
	// Modes are the input modes of the functions the publisher feeds (contract.ModeFaithful,
	// contract.ModeHardened); empty means faithful only. A publisher whose functions use both
	// sends both (contract.Publish). A publisher feeding only hardened functions sends no
	// label at all: a label it never derives cannot be handed to the broker (spec §2.6.1).
	Modes []string
	// Persist, when set, is called with the ratchet state (State) after every ratchet step and
	// before the message of the new round leaves the device; if it fails, nothing is sent and
	// the round is burnt. A device that restarts restores the last state it persisted and so
	// never sends two messages in one round. The state holds the ratchet key K_i: store it
	// where only the device can read it (a sealed key store, a 0600 file on an encrypted
	// volume) and overwrite it in place — an old copy lets its reader derive every later
	// round's labels.
	Persist func(state []byte) error
}

// Publisher is a PPS publisher (spec §2.1, §3.3): after Setup it shares a ratchet key with
// the garbler and publishes each value as one wire label per bit, one ratchet round per
// message (D7). Safe for concurrent use; messages leave in round order.
type Publisher struct {
	dev      Device
	cn       *conn
	down     *downInbox
	persist  func([]byte) error
	faithful bool
	hardened bool

	mu      sync.Mutex
	ratchet *pps.Ratchet
}

// DialPublisher connects a publisher to the MQTT listener and subscribes to its down topic.
func DialPublisher(ctx context.Context, d Device, o PublisherOptions) (*Publisher, error) {
	var faithful, hardened bool
	for _, m := range o.Modes {
		switch m {
		case contract.ModeFaithful:
			faithful = true
		case contract.ModeHardened:
			hardened = true
		default:
			return nil, fmt.Errorf("mode %q, want %q or %q: %w", m, contract.ModeFaithful, contract.ModeHardened, ErrConfig)
		}
	}
	if !hardened {
		faithful = true
	}
	cn, err := dial(ctx, &d, "pub", o.Options)
	if err != nil {
		return nil, err
	}
	p := &Publisher{dev: d, cn: cn, down: newDownInbox(), persist: o.Persist, faithful: faithful, hardened: hardened}
	if err := cn.subscribe(ctx, contract.Topic(contract.DevDownSubject(d.ID())), p.down.put); err != nil {
		cn.close()
		return nil, fmt.Errorf("subscribe to the down topic: %w", err)
	}
	return p, nil
}

// ID is the publisher's device id, which is also its pubid.
func (p *Publisher) ID() string { return p.dev.ID() }

// Topic is the MQTT topic the publisher publishes its labels on.
func (p *Publisher) Topic() string { return contract.Topic(contract.PubSubject(p.ID())) }

// Close disconnects and erases the ratchet key.
func (p *Publisher) Close() {
	p.cn.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet != nil {
		p.ratchet.Zero()
		p.ratchet = nil
	}
}

// Setup runs the publisher handshake (spec §3.11, §8.9): a signed hello with the policy on
// the device's up topic, the garbler's hello-ack (validated under the pinned key) and the
// broker's "registered" notice on its down topic. K_0 = PRF(k_c2s, "pps/v1/pub-ratchet")
// starts the ratchet at round 0. A refusal is ErrRefused, an ack not from the pinned
// garbler ErrTampered.
func (p *Publisher) Setup(ctx context.Context, policy contract.Policy) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet != nil {
		return errors.New("pps client: publisher already set up")
	}
	policy.Fns = slices.Clone(policy.Fns)
	hs, err := newHandshake(&p.dev, contract.TypeHello, "", &policy)
	if err != nil {
		return err
	}
	if err := p.cn.publish(ctx, contract.Topic(contract.DevUpSubject(p.ID())), hs.raw); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var (
		ratchet    *pps.Ratchet
		registered bool
	)
	for ratchet == nil || !registered {
		var b []byte
		select {
		case b = <-p.down.ch:
		case <-p.cn.lost:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("publisher setup: %w", ctx.Err())
		}
		d, err := contract.DecodeDown(b)
		if err != nil {
			continue // not a setup answer; the broker counts its own garbage
		}
		switch {
		case d.Notice != nil && d.Notice.Type == contract.TypeRefused:
			return refused(d.Notice)
		case d.Notice != nil && d.Notice.Type == contract.TypeRegistered:
			registered = d.Notice.PubID == p.ID()
		case d.Ack != nil && d.Ack.Type == contract.TypeHelloAck && ratchet == nil:
			keys, err := hs.keys(d.Ack, p.dev.Garbler)
			if err != nil {
				return err
			}
			k0 := pps.PublisherRatchetKey(&keys)
			keys.Zero()
			ratchet = pps.NewRatchet(&k0, 0, pps.RatchetOptions{})
		}
	}
	p.ratchet = ratchet
	if err := p.save(); err != nil {
		p.ratchet.Zero()
		p.ratchet = nil
		return err
	}
	return nil
}

// Round is the round the next Publish will use.
func (p *Publisher) Round() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet == nil {
		return 0, ErrNotSetUp
	}
	return p.ratchet.Round(), nil
}

// Publish sends values (at most contract.MaxPublishValues) in the next round k (spec §8.3):
// in faithful mode the labels w_{x_v[j]} derived from s_k, in hardened mode y_v = x_v ⊕ m_v
// (pps.MaskValues, D21), on the publisher's topic. The ratchet advances
// before anything is sent — K_k is erased and, with Persist, the new state stored — so a
// failed send burns round k rather than reuse it: two messages in one round would hand the
// broker both labels of every bit on which they differ. It returns k.
func (p *Publisher) Publish(ctx context.Context, values []pps.Fixed) (uint64, error) {
	if len(values) == 0 || len(values) > contract.MaxPublishValues {
		return 0, fmt.Errorf("publish %d values, want 1 to %d: %w", len(values), contract.MaxPublishValues, ErrConfig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet == nil {
		return 0, ErrNotSetUp
	}
	k := p.ratchet.Round()
	seed := p.ratchet.Seed()
	p.ratchet.Advance()
	if err := p.save(); err != nil {
		seed.Zero()
		return 0, fmt.Errorf("round %d burnt: %w", k, err)
	}
	msg := contract.Publish{V: contract.Version, Round: k}
	if p.faithful {
		msg.Labels = pps.PublishLabels(&seed, values)
	}
	if p.hardened {
		msg.Masked = pps.MaskValues(&seed, values)
	}
	seed.Zero()
	b, err := marshal(&msg)
	clear(msg.Labels)
	clear(msg.Masked)
	if err != nil {
		return 0, err
	}
	err = p.cn.publish(ctx, p.Topic(), b)
	clear(b)
	if err != nil {
		return 0, fmt.Errorf("publish round %d (burnt): %w", k, err)
	}
	return k, nil
}

func (p *Publisher) save() error {
	if p.persist == nil {
		return nil
	}
	st := p.state()
	defer clear(st)
	if err := p.persist(st); err != nil {
		return fmt.Errorf("persist ratchet state: %w", err)
	}
	return nil
}

// State is the publisher's ratchet state: the current key K_i and round i, bound to the
// device's key. It is as secret as the device key (see PublisherOptions.Persist).
func (p *Publisher) State() ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet == nil {
		return nil, ErrNotSetUp
	}
	return p.state(), nil
}

// Restore continues from a persisted state instead of running Setup: the next Publish uses
// the state's round. Restoring anything but the latest persisted state would send two
// messages in one round; Persist stores each state before the round is used for that reason.
func (p *Publisher) Restore(state []byte) error {
	key, round, err := decodeState(state, p.dev.Key.Public().(ed25519.PublicKey))
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ratchet != nil {
		key.Zero()
		return errors.New("pps client: publisher already set up")
	}
	p.ratchet = pps.NewRatchet(&key, round, pps.RatchetOptions{})
	return nil
}

// The state encoding: magic, version, the device's Ed25519 public key, LE64 round, K_i.
const (
	stateMagic   = "ppspub"
	stateVersion = 1
	stateSize    = len(stateMagic) + 1 + ed25519.PublicKeySize + 8 + pps.SeedSize
)

func (p *Publisher) state() []byte {
	key, round := p.ratchet.Export()
	b := make([]byte, 0, stateSize)
	b = append(b, stateMagic...)
	b = append(b, stateVersion)
	b = append(b, p.dev.Key.Public().(ed25519.PublicKey)...)
	b = binary.LittleEndian.AppendUint64(b, round)
	b = append(b, key[:]...)
	key.Zero()
	return b
}

func decodeState(b []byte, pk ed25519.PublicKey) (pps.Seed, uint64, error) {
	var key pps.Seed
	if len(b) != stateSize || string(b[:len(stateMagic)]) != stateMagic {
		return key, 0, fmt.Errorf("state of %d bytes: %w", len(b), ErrState)
	}
	b = b[len(stateMagic):]
	if b[0] != stateVersion {
		return key, 0, fmt.Errorf("state version %d: %w", b[0], ErrState)
	}
	b = b[1:]
	if !bytes.Equal(b[:ed25519.PublicKeySize], pk) {
		return key, 0, fmt.Errorf("state of device %x…: %w", b[:4], ErrState)
	}
	b = b[ed25519.PublicKeySize:]
	round := binary.LittleEndian.Uint64(b)
	copy(key[:], b[8:])
	return key, round, nil
}
