package mohito

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Key epochs (spec O16, §3.2). A party's long-term key is rotated by adding a
// key under a higher epoch number; the highest epoch a party holds is its
// current one, the one new rounds name. RoundInfo names the epoch of pk_I and
// of every vendor's pk_V in force for its round, and every role that opens an
// HPKE layer picks the private key by that epoch, so rounds opened before a
// rotation still decrypt. A superseded epoch is kept for a retention window of
// W rounds after the first round that named a newer one, then forgotten.
//
// A key can also be staged: held for decryption but not yet current nor
// announced. A role that reloads its key source live stages a new epoch and
// activates it only after every replica sharing the source has had time to
// load it, so no round names an epoch a peer does not hold yet.

// ErrKeyEpoch: a round names a key epoch the role does not hold (never loaded,
// or already past its retention window).
var ErrKeyEpoch = errors.New("mohito: key epoch not held")

// MinKeyRetention is the smallest retention window: with pipelining (spec
// §3.5) round t−1 is still being closed and decrypted while round t, the
// first to name a new epoch, collects.
const MinKeyRetention = 2

// MaxKeyEpochs bounds the epochs in one key set from the network.
const MaxKeyEpochs = 64

// KeyRing is one party's private keys by epoch. Safe for concurrent use.
type KeyRing struct {
	suite  Suite
	retain uint64

	mu         sync.RWMutex
	keys       map[uint32]*PrivateKey
	staged     map[uint32]bool   // held, not yet current nor announced
	superseded map[uint32]uint64 // epoch → first round seen naming a newer epoch
}

// NewKeyRing returns an empty ring for suite s that keeps a superseded epoch
// for retain rounds (at least MinKeyRetention).
func NewKeyRing(s Suite, retain int) (*KeyRing, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: suite %d", ErrParams, s)
	}
	if retain < MinKeyRetention {
		return nil, fmt.Errorf("%w: key retention of %d rounds (minimum %d)", ErrParams, retain, MinKeyRetention)
	}
	return &KeyRing{suite: s, retain: uint64(retain), keys: map[uint32]*PrivateKey{}, staged: map[uint32]bool{}, superseded: map[uint32]uint64{}}, nil
}

// SingleKeyRing is a ring holding k as epoch 0 (tests and one-key deployments).
func SingleKeyRing(k *PrivateKey, retain int) (*KeyRing, error) {
	r, err := NewKeyRing(k.Suite(), retain)
	if err != nil {
		return nil, err
	}
	return r, r.Add(0, k)
}

// Suite returns the ring's suite.
func (r *KeyRing) Suite() Suite { return r.suite }

// Add installs k as epoch, active at once. Adding the same key again is a
// no-op (and activates it if staged); a different key under an epoch the ring
// holds is refused (an epoch names one key).
func (r *KeyRing) Add(epoch uint32, k *PrivateKey) error {
	return r.put(epoch, k, false)
}

// Stage installs k as epoch for decryption only: Current and PublicKeys skip
// it until Activate. Staging a key the ring already holds is a no-op.
func (r *KeyRing) Stage(epoch uint32, k *PrivateKey) error {
	return r.put(epoch, k, true)
}

func (r *KeyRing) put(epoch uint32, k *PrivateKey, staged bool) error {
	if k == nil || k.suite != r.suite {
		return fmt.Errorf("%w: key of epoch %d is not a %v key", ErrParams, epoch, r.suite)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.keys[epoch]; ok {
		if !old.PublicKey().Equal(k.PublicKey()) {
			return fmt.Errorf("%w: epoch %d already holds a different key", ErrParams, epoch)
		}
		if !staged {
			delete(r.staged, epoch)
		}
		return nil
	}
	r.keys[epoch] = k
	if staged {
		r.staged[epoch] = true
	}
	return nil
}

// Activate makes a staged epoch eligible as current and announced. It
// reports whether epoch was staged.
func (r *KeyRing) Activate(epoch uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.staged[epoch] {
		return false
	}
	delete(r.staged, epoch)
	return true
}

// Staged returns the staged epochs, ascending.
func (r *KeyRing) Staged() []uint32 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]uint32, 0, len(r.staged))
	for e := range r.staged {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

// Highest returns the highest epoch held, staged or active.
func (r *KeyRing) Highest() (epoch uint32, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for e := range r.keys {
		if !ok || e > epoch {
			epoch, ok = e, true
		}
	}
	return epoch, ok
}

// Len is the number of epochs held.
func (r *KeyRing) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.keys)
}

// Current returns the highest active epoch and its key; ok is false when no
// epoch is active.
func (r *KeyRing) Current() (epoch uint32, k *PrivateKey, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for e, key := range r.keys {
		if !r.staged[e] && (!ok || e > epoch) {
			epoch, k, ok = e, key, true
		}
	}
	return epoch, k, ok
}

// Key returns the key of epoch (active or staged), or ErrKeyEpoch.
func (r *KeyRing) Key(epoch uint32) (*PrivateKey, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.keys[epoch]
	if !ok {
		return nil, fmt.Errorf("%w: epoch %d (held: %v)", ErrKeyEpoch, epoch, r.epochsLocked())
	}
	return k, nil
}

// KeyFor returns the key of epoch after checking that its public key is want,
// the one a round announced: a key id that names another key is an error,
// never a silent decryption failure of every message.
func (r *KeyRing) KeyFor(epoch uint32, want *PublicKey) (*PrivateKey, error) {
	k, err := r.Key(epoch)
	if err != nil {
		return nil, err
	}
	if want == nil || !k.PublicKey().Equal(want) {
		return nil, fmt.Errorf("%w: the round's public key of epoch %d is not the one this role holds", ErrKeyEpoch, epoch)
	}
	return k, nil
}

// Epochs returns the epochs held (active and staged), ascending.
func (r *KeyRing) Epochs() []uint32 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.epochsLocked()
}

func (r *KeyRing) epochsLocked() []uint32 {
	out := make([]uint32, 0, len(r.keys))
	for e := range r.keys {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

// PublicKeys returns the public half of every active epoch held (the key
// directory announcement).
func (r *KeyRing) PublicKeys() KeySet {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ks := make(KeySet, 0, len(r.keys))
	for _, e := range r.epochsLocked() {
		if r.staged[e] {
			continue
		}
		ks = append(ks, EpochKey{Epoch: e, Key: r.keys[e].PublicKey()})
	}
	return ks
}

// Observe records that round t names epoch for this party, and forgets every
// epoch older than the current one once retain rounds have passed since the
// first round that named a newer epoch. It returns the epochs it dropped.
// Rounds may be observed out of order; only round ids count, so replicas
// that each see a subset of the rounds agree on when an epoch expires.
func (r *KeyRing) Observe(t uint64, epoch uint32) (dropped []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cur uint32
	for e := range r.keys {
		if !r.staged[e] {
			cur = max(cur, e)
		}
	}
	for e := range r.keys {
		if e >= epoch {
			continue
		}
		if first, ok := r.superseded[e]; !ok || t < first {
			r.superseded[e] = t
		}
	}
	for e, first := range r.superseded {
		if _, held := r.keys[e]; !held {
			delete(r.superseded, e)
			continue
		}
		if e < cur && t >= first+r.retain {
			delete(r.keys, e)
			delete(r.staged, e)
			delete(r.superseded, e)
			dropped = append(dropped, e)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// Equal reports whether k and o are the same public key (constant time in
// the key bytes).
func (k *PublicKey) Equal(o *PublicKey) bool {
	if k == nil || o == nil || k.suite != o.suite {
		return false
	}
	return subtle.ConstantTimeCompare(k.Bytes(), o.Bytes()) == 1
}

// EpochKey is one public key with its epoch.
type EpochKey struct {
	Epoch uint32
	Key   *PublicKey
}

// KeySet is a party's public keys by epoch, ascending: the key directory
// entry one party announces (spec §3.2).
type KeySet []EpochKey

// Current returns the highest epoch's entry; ok is false for an empty set.
func (ks KeySet) Current() (EpochKey, bool) {
	var best EpochKey
	ok := false
	for _, e := range ks {
		if !ok || e.Epoch > best.Epoch {
			best, ok = e, true
		}
	}
	return best, ok
}

// Lookup returns the key of epoch, or nil.
func (ks KeySet) Lookup(epoch uint32) *PublicKey {
	for _, e := range ks {
		if e.Epoch == epoch {
			return e.Key
		}
	}
	return nil
}

// MarshalBinary encodes the set: count(2) ‖ count × (epoch(4) ‖ pk), epochs
// strictly ascending.
func (ks KeySet) MarshalBinary() ([]byte, error) {
	if len(ks) == 0 || len(ks) > MaxKeyEpochs {
		return nil, fmt.Errorf("%w: key set of %d epochs", ErrParams, len(ks))
	}
	s := ks[0].Key.Suite()
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(ks)*(4+s.PublicKeySize())), uint16(len(ks)))
	for i, e := range ks {
		if e.Key == nil || e.Key.Suite() != s || (i > 0 && e.Epoch <= ks[i-1].Epoch) {
			return nil, fmt.Errorf("%w: key set entry %d", ErrParams, i)
		}
		b = binary.BigEndian.AppendUint32(b, e.Epoch)
		b = append(b, e.Key.Bytes()...)
	}
	return b, nil
}

// ParseKeySet decodes a key directory entry of suite s from the network. A
// bare public key (the announcement of a party without epochs) is epoch 0.
func ParseKeySet(s Suite, b []byte) (KeySet, error) {
	pks := s.PublicKeySize()
	if !s.Valid() {
		return nil, fmt.Errorf("%w: suite %d", ErrNonCanonical, s)
	}
	if len(b) == pks {
		pk, err := ParsePublicKey(s, b)
		if err != nil {
			return nil, err
		}
		return KeySet{{Epoch: 0, Key: pk}}, nil
	}
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: key set of %d bytes", ErrSize, len(b))
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > MaxKeyEpochs || len(b) != 2+n*(4+pks) {
		return nil, fmt.Errorf("%w: key set of %d bytes for %d epochs", ErrSize, len(b), n)
	}
	ks := make(KeySet, n)
	for i := range ks {
		r := b[2+i*(4+pks):]
		ks[i].Epoch = binary.BigEndian.Uint32(r)
		if i > 0 && ks[i].Epoch <= ks[i-1].Epoch {
			return nil, fmt.Errorf("%w: key set epochs not ascending", ErrNonCanonical)
		}
		pk, err := ParsePublicKey(s, r[4:4+pks])
		if err != nil {
			return nil, err
		}
		ks[i].Key = pk
	}
	return ks, nil
}
