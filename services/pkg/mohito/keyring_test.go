package mohito

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func epochKey(t testing.TB, seed byte) *PrivateKey {
	t.Helper()
	k, err := DeriveKey(SuiteX25519, bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKeyRingSelection: the current epoch is the highest; keys are selected
// by epoch; an epoch names one key; a round's key id must name the round's
// public key.
func TestKeyRingSelection(t *testing.T) {
	r, err := NewKeyRing(SuiteX25519, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.Current(); ok {
		t.Fatal("empty ring has a current epoch")
	}
	k0, k1, k5 := epochKey(t, 1), epochKey(t, 2), epochKey(t, 3)
	for e, k := range map[uint32]*PrivateKey{5: k5, 0: k0, 1: k1} {
		if err := r.Add(e, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add(1, k1); err != nil {
		t.Fatalf("re-adding the same key: %v", err)
	}
	if err := r.Add(1, k0); !errors.Is(err, ErrParams) {
		t.Fatalf("a second key under epoch 1: %v", err)
	}
	if e, k, ok := r.Current(); !ok || e != 5 || k != k5 {
		t.Fatalf("current = %d", e)
	}
	if got := r.Epochs(); !slices.Equal(got, []uint32{0, 1, 5}) {
		t.Fatalf("epochs %v", got)
	}
	if k, err := r.Key(1); err != nil || k != k1 {
		t.Fatalf("key 1: %v", err)
	}
	if _, err := r.Key(2); !errors.Is(err, ErrKeyEpoch) {
		t.Fatalf("key 2: %v", err)
	}
	if _, err := r.KeyFor(1, k0.PublicKey()); !errors.Is(err, ErrKeyEpoch) {
		t.Fatalf("epoch 1 with epoch 0's public key: %v", err)
	}
	if k, err := r.KeyFor(0, k0.PublicKey()); err != nil || k != k0 {
		t.Fatalf("KeyFor(0): %v", err)
	}
	ks := r.PublicKeys()
	if c, _ := ks.Current(); c.Epoch != 5 || !c.Key.Equal(k5.PublicKey()) || ks.Lookup(1) == nil || ks.Lookup(2) != nil {
		t.Fatal("public key set")
	}
	if _, err := NewKeyRing(SuiteX25519, MinKeyRetention-1); !errors.Is(err, ErrParams) {
		t.Fatal("retention below the minimum accepted")
	}
}

// TestKeyRingRetention (known answer): epoch 0 is superseded by round 10,
// the first to name epoch 1, and is forgotten at round 10+W, not before;
// the current epoch is never dropped.
func TestKeyRingRetention(t *testing.T) {
	const w = 3
	r, _ := NewKeyRing(SuiteX25519, w)
	_ = r.Add(0, epochKey(t, 1))
	for tt := uint64(1); tt < 10; tt++ {
		if d := r.Observe(tt, 0); d != nil {
			t.Fatalf("round %d dropped %v", tt, d)
		}
	}
	_ = r.Add(1, epochKey(t, 2)) // rotation: loaded, not yet named
	if d := r.Observe(9, 0); d != nil {
		t.Fatalf("dropped %v before any round named epoch 1", d)
	}
	steps := []struct {
		t     uint64
		epoch uint32
		drop  []uint32
	}{
		{10, 1, nil},
		{9, 0, nil}, // a pipelined round still on epoch 0
		{11, 1, nil},
		{12, 1, nil},
		{13, 1, []uint32{0}},
		{14, 1, nil},
		{100, 1, nil}, // the current epoch stays
	}
	for _, s := range steps {
		if d := r.Observe(s.t, s.epoch); !slices.Equal(d, s.drop) {
			t.Fatalf("round %d: dropped %v, want %v", s.t, d, s.drop)
		}
	}
	if got := r.Epochs(); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("epochs %v", got)
	}
}

// TestKeyRingRetentionProperty: with rounds observed up to one place out of
// order (pipelining), every round finds the epoch it names, and once the
// window has passed only the highest epoch is left.
func TestKeyRingRetentionProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		w := MinKeyRetention + rng.IntN(4)
		r, _ := NewKeyRing(SuiteX25519, w)
		epochs := 1 + rng.IntN(4)
		// Round t names epoch switch(t): epochs rotate at random rounds.
		switches := []uint64{0}
		for e := 1; e < epochs; e++ {
			switches = append(switches, switches[e-1]+uint64(1+rng.IntN(6)))
		}
		epochOf := func(t uint64) uint32 {
			e := 0
			for i, s := range switches {
				if t >= s {
					e = i
				}
			}
			return uint32(e)
		}
		for e := range epochs {
			_ = r.Add(uint32(e), epochKey(t, byte(e+1)))
		}
		last := switches[len(switches)-1] + uint64(2*w)
		// Pipelining: rounds are observed up to two out of order.
		order := make([]uint64, 0, last)
		for tt := range last {
			order = append(order, tt)
		}
		for i := 0; i+1 < len(order); i++ {
			if rng.IntN(3) == 0 {
				order[i], order[i+1] = order[i+1], order[i]
				i++
			}
		}
		for _, tt := range order {
			e := epochOf(tt)
			r.Observe(tt, e)
			if _, err := r.Key(e); err != nil {
				t.Fatalf("iter %d: round %d lost its epoch %d (W=%d, switches %v)", iter, tt, e, w, switches)
			}
		}
		if cur, _, ok := r.Current(); !ok || int(cur) != epochs-1 || r.Len() != 1 {
			t.Fatalf("iter %d: after the window the ring holds %v", iter, r.Epochs())
		}
	}
}

// TestKeySetKnownAnswer pins the key directory encoding and the legacy
// bare-key form.
func TestKeySetKnownAnswer(t *testing.T) {
	k0, k7 := epochKey(t, 1), epochKey(t, 2)
	ks := KeySet{{0, k0.PublicKey()}, {7, k7.PublicKey()}}
	b, err := ks.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := "0002" + "00000000" + hex.EncodeToString(k0.PublicKey().Bytes()) + "00000007" + hex.EncodeToString(k7.PublicKey().Bytes())
	if hex.EncodeToString(b) != want {
		t.Fatalf("encoding %x", b)
	}
	got, err := ParseKeySet(SuiteX25519, b)
	if err != nil || len(got) != 2 || got[1].Epoch != 7 || !got[1].Key.Equal(k7.PublicKey()) {
		t.Fatalf("round trip: %v", err)
	}
	legacy, err := ParseKeySet(SuiteX25519, k0.PublicKey().Bytes())
	if err != nil || len(legacy) != 1 || legacy[0].Epoch != 0 {
		t.Fatalf("bare key: %v", err)
	}
	swapped := append([]byte{0, 2}, b[2+36:]...)
	swapped = append(swapped, b[2:2+36]...)
	if _, err := ParseKeySet(SuiteX25519, swapped); !errors.Is(err, ErrNonCanonical) {
		t.Fatalf("descending epochs: %v", err)
	}
	if _, err := (KeySet{{7, k7.PublicKey()}, {0, k0.PublicKey()}}).MarshalBinary(); err == nil {
		t.Fatal("marshalled descending epochs")
	}
}

// FuzzParseKeySet: key directory entries come from the network.
func FuzzParseKeySet(f *testing.F) {
	k := epochKey(f, 1)
	b, _ := KeySet{{3, k.PublicKey()}}.MarshalBinary()
	seeds(f, b, k.PublicKey().Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := ParseKeySet(SuiteX25519, b)
		if err != nil {
			requireSentinel(t, err)
			return
		}
		out, err := ks.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted set does not marshal: %v", err)
		}
		if len(b) != SuiteX25519.PublicKeySize() && !bytes.Equal(out, b) {
			t.Fatal("not canonical")
		}
	})
}

// TestKeyRingStaged: a staged epoch decrypts at once but is neither current
// nor announced, and does not retire the epoch in force, until activated.
func TestKeyRingStaged(t *testing.T) {
	r, err := NewKeyRing(SuiteX25519, MinKeyRetention)
	if err != nil {
		t.Fatal(err)
	}
	k1, k2 := epochKey(t, 1), epochKey(t, 2)
	if err := r.Add(1, k1); err != nil {
		t.Fatal(err)
	}
	if err := r.Stage(2, k2); err != nil {
		t.Fatal(err)
	}
	if err := r.Stage(2, k1); !errors.Is(err, ErrParams) {
		t.Fatalf("staging a second key under epoch 2: %v", err)
	}
	if k, err := r.KeyFor(2, k2.PublicKey()); err != nil || k != k2 {
		t.Fatalf("a staged epoch must decrypt: %v", err)
	}
	if e, _, _ := r.Current(); e != 1 {
		t.Fatalf("current = %d while 2 is staged", e)
	}
	if ks := r.PublicKeys(); len(ks) != 1 || ks[0].Epoch != 1 {
		t.Fatalf("announced %v while 2 is staged", ks)
	}
	if h, ok := r.Highest(); !ok || h != 2 {
		t.Fatalf("highest = %d, %v", h, ok)
	}
	// Rounds keep naming epoch 1: nothing retires while 2 is only staged.
	for round := uint64(1); round < 10; round++ {
		if dropped := r.Observe(round, 1); len(dropped) > 0 {
			t.Fatalf("round %d retired %v", round, dropped)
		}
	}
	if !r.Activate(2) || r.Activate(2) {
		t.Fatal("Activate must report the staged epoch once")
	}
	if got := r.Staged(); len(got) != 0 {
		t.Fatalf("staged after activation: %v", got)
	}
	if e, k, _ := r.Current(); e != 2 || k != k2 {
		t.Fatalf("current = %d after activation", e)
	}
	if ks := r.PublicKeys(); len(ks) != 2 {
		t.Fatalf("announced %v after activation", ks)
	}
	// Add of a staged key activates it.
	k3 := epochKey(t, 3)
	if err := r.Stage(3, k3); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(3, k3); err != nil || len(r.Staged()) != 0 {
		t.Fatalf("Add after Stage: %v, staged %v", err, r.Staged())
	}
}
