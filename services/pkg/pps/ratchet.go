package pps

import (
	"errors"
	"fmt"
)

var (
	// ErrRoundErased: the round is behind the ratchet and its seed is not retained. There is
	// no way back from K_{i+1} to round i (spec §8.1, §10 #8–9); the Garbler turns this
	// error into nullification of that input.
	ErrRoundErased = errors.New("pps: ratchet round erased")
	// ErrRoundTooFar: the round is further ahead than the ratchet's MaxSkip. A round number
	// comes from the network; without a bound one message could make the Garbler hash for hours.
	ErrRoundTooFar = errors.New("pps: ratchet round too far ahead")
)

// DefaultMaxSkip bounds how many steps one AdvanceTo may take (about a second of BLAKE2b).
const DefaultMaxSkip = 1 << 20

// RatchetOptions configures the seed cache of a Ratchet.
type RatchetOptions struct {
	// Retain is how many past-round seeds are kept for rounds the Broker may still request
	// (D8: accumulation windows, static values, out-of-order requests). The oldest is erased
	// when the cache is full. Zero keeps none: a publisher's ratchet.
	Retain int
	// MaxSkip bounds AdvanceTo; zero means DefaultMaxSkip.
	MaxSkip uint64
}

// Ratchet is the forward-secure hash ratchet of spec §8.1 (paper Fig. 3):
// s_i = PRF(K_i, "pps/v1/seed"), K_{i+1} = PRF(K_i, "pps/v1/next"). Only the current key
// and the retained seeds are held; the previous key is overwritten in place on every step.
// A Ratchet is not safe for concurrent use: ratchet writes are single-writer (spec §5.3).
type Ratchet struct {
	key   Seed
	round uint64
	opt   RatchetOptions
	cache map[uint64]*Seed
	order []uint64 // cached rounds, oldest first; may name released rounds
}

// NewRatchet starts a ratchet whose key at round is *key. It takes the key over: *key is
// zeroised, so the caller holds no copy of K.
func NewRatchet(key *Seed, round uint64, opt RatchetOptions) *Ratchet {
	if opt.Retain < 0 {
		opt.Retain = 0
	}
	if opt.MaxSkip == 0 {
		opt.MaxSkip = DefaultMaxSkip
	}
	r := &Ratchet{key: *key, round: round, opt: opt}
	key.Zero()
	return r
}

// Round is the ratchet's current round i.
func (r *Ratchet) Round() uint64 { return r.round }

// Seed returns s_i for the current round.
func (r *Ratchet) Seed() Seed { return PRF(&r.key, labelSeed) }

// Advance moves to round i+1, erasing K_i. With Retain > 0, s_i is cached first.
func (r *Ratchet) Advance() {
	if r.opt.Retain > 0 {
		s := r.Seed()
		r.put(r.round, &s)
		s.Zero()
	}
	next := PRF(&r.key, labelNext)
	r.key = next // overwrites K_i in place
	next.Zero()
	r.round++
}

// AdvanceTo returns s_k. For k ahead of the ratchet it advances to k (caching the skipped
// seeds if Retain > 0) and stays there: the caller decides whether to Advance after use. For
// k behind it returns the retained seed, or ErrRoundErased.
func (r *Ratchet) AdvanceTo(k uint64) (Seed, error) {
	switch {
	case k < r.round:
		if s, ok := r.cache[k]; ok {
			return *s, nil
		}
		return Seed{}, fmt.Errorf("round %d, ratchet at %d: %w", k, r.round, ErrRoundErased)
	case k-r.round > r.opt.MaxSkip:
		return Seed{}, fmt.Errorf("round %d, ratchet at %d, at most %d steps: %w", k, r.round, r.opt.MaxSkip, ErrRoundTooFar)
	}
	for r.round < k {
		r.Advance()
	}
	return r.Seed(), nil
}

// Release erases the retained seed of round k (the Broker no longer needs it, D8). From
// then on forward secrecy covers round k.
func (r *Ratchet) Release(k uint64) {
	if s, ok := r.cache[k]; ok {
		s.Zero()
		delete(r.cache, k)
	}
}

// Retained reports how many past-round seeds the ratchet holds.
func (r *Ratchet) Retained() int { return len(r.cache) }

// Export returns the current key and round, for persisting the ratchet (encrypted, spec
// §5.3). Retained seeds are not exported: a restarted Garbler nullifies those rounds.
func (r *Ratchet) Export() (Seed, uint64) { return r.key, r.round }

// Zero erases the key and every retained seed; the ratchet is unusable afterwards.
func (r *Ratchet) Zero() {
	r.key.Zero()
	for k, s := range r.cache {
		s.Zero()
		delete(r.cache, k)
	}
	r.order = nil
}

func (r *Ratchet) put(round uint64, s *Seed) {
	if r.cache == nil {
		r.cache = make(map[uint64]*Seed, r.opt.Retain)
	}
	c := new(Seed)
	*c = *s
	r.cache[round] = c
	r.order = append(r.order, round)
	for len(r.cache) > r.opt.Retain {
		oldest := r.order[0]
		r.order = r.order[1:]
		r.Release(oldest) // no-op for a round already released
	}
	if len(r.order) > 2*r.opt.Retain+16 { // drop released rounds so order stays bounded
		kept := r.order[:0]
		for _, k := range r.order {
			if _, ok := r.cache[k]; ok {
				kept = append(kept, k)
			}
		}
		r.order = kept
	}
}
