package pps

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
)

// ErrEpoch: an output was masked under a function key epoch the subscriber does not hold —
// it was revoked, or has not received the new epoch's grant yet (D14).
var ErrEpoch = errors.New("pps: function key epoch not held")

// FunctionKeys is the Garbler's function ratchet for one function, with its key epochs and
// subscribers (spec §3.3, §8.5, D14). Every execution allocates a fresh round ρ, never reused.
// Revoking a subscriber starts a new epoch with a fresh random K'_0 and re-grants it to the
// remaining subscribers only, so the revoked one cannot unmask anything masked afterwards.
// Not safe for concurrent use (single writer per function, spec §5.3).
type FunctionKeys struct {
	rand    io.Reader
	epoch   uint64
	ratchet *Ratchet
	subs    map[string]subscriber
}

type subscriber struct {
	keys SessionKeys
	ad   []byte
}

// NewFunctionKeys starts epoch 0 with a fresh K'_0; rand nil means crypto/rand.
func NewFunctionKeys(rnd io.Reader) (*FunctionKeys, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	f := &FunctionKeys{rand: rnd, subs: map[string]subscriber{}}
	if err := f.newEpoch(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FunctionKeys) newEpoch() error {
	var k Seed
	if _, err := io.ReadFull(f.rand, k[:]); err != nil {
		return fmt.Errorf("new function key epoch: %w", err)
	}
	if f.ratchet != nil {
		f.ratchet.Zero()
	}
	f.ratchet = NewRatchet(&k, 0, RatchetOptions{})
	return nil
}

// RestoreFunctionKeys continues FunctionKeys from an exported state: the epoch, the next
// unallocated round and its ratchet key K'_round (the Garbler's persisted function record),
// with no subscriber (Known re-registers them). key is zeroised; rand nil means crypto/rand.
func RestoreFunctionKeys(rnd io.Reader, epoch, round uint64, key *Seed) *FunctionKeys {
	if rnd == nil {
		rnd = rand.Reader
	}
	return &FunctionKeys{rand: rnd, epoch: epoch, ratchet: NewRatchet(key, round, RatchetOptions{}), subs: map[string]subscriber{}}
}

// Export returns the state to persist before any round it allocated is used (§10 #7): the
// epoch, the next unallocated round and its key. The caller zeroes the key.
func (f *FunctionKeys) Export() (epoch, round uint64, key Seed) {
	key, round = f.ratchet.Export()
	return f.epoch, round, key
}

// Known registers a subscriber that already holds the current epoch's grant (one restored
// from the Garbler's records) without granting it again. keys is copied.
func (f *FunctionKeys) Known(id string, keys *SessionKeys, ad []byte) {
	f.subs[id] = subscriber{keys: *keys, ad: append([]byte(nil), ad...)}
}

// Zero erases the ratchet key and every subscriber's session keys; f is unusable afterwards.
func (f *FunctionKeys) Zero() {
	f.ratchet.Zero()
	for id := range f.subs {
		s := f.subs[id]
		s.keys.Zero()
		f.subs[id] = s // overwrite the map's copy before dropping it
		delete(f.subs, id)
	}
}

// Epoch is the current key epoch.
func (f *FunctionKeys) Epoch() uint64 { return f.epoch }

// AllocateRound returns the next unused function round ρ of the current epoch and its seed
// s'_ρ (for the output mask), and advances past it so that no later execution and no later
// subscriber gets it again.
func (f *FunctionKeys) AllocateRound() (epoch, round uint64, seed Seed) {
	epoch, round, seed = f.epoch, f.ratchet.Round(), f.ratchet.Seed()
	f.ratchet.Advance()
	return epoch, round, seed
}

// Subscribe registers a subscriber (or refreshes it) with the session keys of its
// handshake and the AD its grants are bound to, and returns its sealed grant of the current
// key: the next unallocated round, so it can unmask no output masked before it subscribed.
func (f *FunctionKeys) Subscribe(id string, keys *SessionKeys, ad []byte) ([]byte, error) {
	f.subs[id] = subscriber{keys: *keys, ad: append([]byte(nil), ad...)}
	return f.grant(id)
}

// Subscribers is the number of subscribers holding the current epoch.
func (f *FunctionKeys) Subscribers() int { return len(f.subs) }

// Revoke removes a subscriber and starts a new epoch; it returns the new sealed grants of
// the remaining subscribers, by id, for the Garbler to send.
func (f *FunctionKeys) Revoke(id string) (map[string][]byte, error) {
	s, ok := f.subs[id]
	if !ok {
		return nil, fmt.Errorf("revoke %q: not a subscriber", id)
	}
	s.keys.Zero()
	delete(f.subs, id)
	if err := f.newEpoch(); err != nil {
		return nil, err
	}
	f.epoch++
	out := make(map[string][]byte, len(f.subs))
	for sid := range f.subs {
		g, err := f.grant(sid)
		if err != nil {
			return nil, err
		}
		out[sid] = g
	}
	return out, nil
}

func (f *FunctionKeys) grant(id string) ([]byte, error) {
	s := f.subs[id]
	key, round := f.ratchet.Export()
	g := Grant{Key: key, Round: round, Epoch: f.epoch}
	defer g.Zero()
	return SealGrant(&s.keys, &g, s.ad, f.rand)
}

// Subscription is a subscriber's function key: the ratchet of the current epoch and, until
// the next grant, that of the previous one, so outputs masked just before a re-key still
// open (spec §8.7, D14).
type Subscription struct {
	retain           int
	epoch, prevEpoch uint64
	cur, prev        *Ratchet
	hasCur, hasPrev  bool
}

// NewSubscription holds no key yet; retain is how many past function rounds it can still
// unmask out of order.
func NewSubscription(retain int) *Subscription { return &Subscription{retain: retain} }

// Accept installs an opened grant. A grant of an older epoch than the one held is refused.
// The grant's key is zeroised.
func (s *Subscription) Accept(g *Grant) error {
	defer g.Zero()
	switch {
	case s.hasCur && g.Epoch < s.epoch:
		return fmt.Errorf("grant of epoch %d, holding %d: %w", g.Epoch, s.epoch, ErrEpoch)
	case s.hasCur && g.Epoch == s.epoch:
		return nil // a repeated grant; the ratchet already covers its rounds
	}
	if s.hasPrev {
		s.prev.Zero()
	}
	s.prev, s.prevEpoch, s.hasPrev = s.cur, s.epoch, s.hasCur
	s.cur = NewRatchet(&g.Key, g.Round, RatchetOptions{Retain: s.retain})
	s.epoch, s.hasCur = g.Epoch, true
	return nil
}

// Unmask opens an output masked at (epoch, round): o = masked ⊕ PRG(s'_round) (spec §8.7).
func (s *Subscription) Unmask(epoch, round uint64, masked []byte, bits int) ([]byte, error) {
	var r *Ratchet
	switch {
	case s.hasCur && epoch == s.epoch:
		r = s.cur
	case s.hasPrev && epoch == s.prevEpoch:
		r = s.prev
	default:
		return nil, fmt.Errorf("output of epoch %d: %w", epoch, ErrEpoch)
	}
	seed, err := r.AdvanceTo(round)
	if err != nil {
		return nil, fmt.Errorf("output of epoch %d round %d: %w", epoch, round, err)
	}
	defer seed.Zero()
	return Unmask(&seed, masked, bits)
}
