package pps

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"testing"
)

// subscriberOf runs a crypto_kx handshake with the Garbler and returns both sides' keys.
func subscriberOf(t *testing.T) (client, server SessionKeys) {
	t.Helper()
	c, _ := ecdh.X25519().GenerateKey(rand.Reader)
	g, _ := ecdh.X25519().GenerateKey(rand.Reader)
	ck, err := ClientSessionKeys(c, g.PublicKey().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sk, err := ServerSessionKeys(g, c.PublicKey().Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return ck, sk
}

func accept(t *testing.T, s *Subscription, k *SessionKeys, sealed, ad []byte) {
	t.Helper()
	g, err := OpenGrant(k, sealed, ad)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(&g); err != nil {
		t.Fatal(err)
	}
}

// execute masks o under a freshly allocated function round, as a garbled execution does.
func execute(f *FunctionKeys, o []byte, bits int) (epoch, round uint64, masked []byte) {
	epoch, round, seed := f.AllocateRound()
	masked = OutputMask(&seed, bits)
	for i := range masked {
		masked[i] ^= o[i]
	}
	return epoch, round, masked
}

func TestRevokedSubscriberCannotUnmaskNewOutputs(t *testing.T) {
	f, err := NewFunctionKeys(nil)
	if err != nil {
		t.Fatal(err)
	}
	aC, aG := subscriberOf(t)
	bC, bG := subscriberOf(t)
	adA, adB := []byte("fn|A"), []byte("fn|B")
	subA, subB := NewSubscription(4), NewSubscription(4)
	sealedA, _ := f.Subscribe("A", &aG, adA)
	sealedB, _ := f.Subscribe("B", &bG, adB)
	accept(t, subA, &aC, sealedA, adA)
	accept(t, subB, &bC, sealedB, adB)

	o := EncodeFixed([]Fixed{FixedFromFloat(21.5)})
	e0, r0, m0 := execute(f, o, 32)
	for name, s := range map[string]*Subscription{"A": subA, "B": subB} {
		if got, err := s.Unmask(e0, r0, m0, 32); err != nil || !bytes.Equal(got, o) {
			t.Fatalf("%s before revocation: %x, %v", name, got, err)
		}
	}

	regrants, err := f.Revoke("B")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := regrants["B"]; ok || len(regrants) != 1 {
		t.Fatalf("re-grants go to %d subscribers (B included: %v)", len(regrants), ok)
	}
	accept(t, subA, &aC, regrants["A"], adA)

	e1, r1, m1 := execute(f, o, 32)
	if e1 == e0 {
		t.Fatalf("revocation kept epoch %d", e0)
	}
	if got, err := subA.Unmask(e1, r1, m1, 32); err != nil || !bytes.Equal(got, o) {
		t.Fatalf("A after revocation: %x, %v", got, err)
	}
	if _, err := subB.Unmask(e1, r1, m1, 32); !errors.Is(err, ErrEpoch) {
		t.Fatalf("revoked B: %v, want ErrEpoch", err)
	}
	// Even ignoring the epoch, B's old key does not give the new mask.
	if got, err := subB.Unmask(e0, r1, m1, 32); err == nil && bytes.Equal(got, o) {
		t.Fatalf("revoked B unmasked a new-epoch output with its old key")
	}
	// An output of the old epoch that arrives after the re-key still opens for A.
	if got, err := subA.Unmask(e0, r0, m0, 32); err != nil || !bytes.Equal(got, o) {
		t.Fatalf("A, previous-epoch output after the re-key: %x, %v", got, err)
	}
}

func TestNewSubscriberCannotUnmaskEarlierRounds(t *testing.T) {
	f, _ := NewFunctionKeys(nil)
	o := []byte{0xA5}
	e, r, m := execute(f, o, 8)
	cC, cG := subscriberOf(t)
	sealed, _ := f.Subscribe("late", &cG, nil)
	s := NewSubscription(16)
	accept(t, s, &cC, sealed, nil)
	if _, err := s.Unmask(e, r, m, 8); !errors.Is(err, ErrRoundErased) {
		t.Fatalf("a round allocated before subscribing: %v, want ErrRoundErased", err)
	}
	e2, r2, m2 := execute(f, o, 8)
	if got, err := s.Unmask(e2, r2, m2, 8); err != nil || !bytes.Equal(got, o) {
		t.Fatalf("the next round: %x, %v", got, err)
	}
}

func TestFunctionRoundsAreNeverReused(t *testing.T) {
	f, _ := NewFunctionKeys(nil)
	cC, cG := subscriberOf(t)
	f.Subscribe("s", &cG, nil)
	seen := map[[2]uint64]bool{}
	seeds := map[Seed]bool{}
	for i := range 300 {
		if i%100 == 99 {
			f.Subscribe("t", &cC, nil)
			if _, err := f.Revoke("t"); err != nil {
				t.Fatal(err)
			}
		}
		e, r, s := f.AllocateRound()
		if seen[[2]uint64{e, r}] || seeds[s] {
			t.Fatalf("execution %d reuses (epoch %d, round %d) or its seed", i, e, r)
		}
		seen[[2]uint64{e, r}], seeds[s] = true, true
	}
}

func TestSubscriptionRefusesOlderEpoch(t *testing.T) {
	s := NewSubscription(0)
	if err := s.Accept(&Grant{Key: *testSeed(1), Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(&Grant{Key: *testSeed(2), Epoch: 2}); !errors.Is(err, ErrEpoch) {
		t.Fatalf("older epoch grant: %v, want ErrEpoch", err)
	}
	if _, err := s.Unmask(7, 0, []byte{0}, 8); !errors.Is(err, ErrEpoch) {
		t.Fatalf("unknown epoch: %v, want ErrEpoch", err)
	}
	g := Grant{Key: *testSeed(3), Epoch: 4}
	s.Accept(&g)
	if g.Key != (Seed{}) {
		t.Fatalf("Accept left the grant's key in the caller's Grant")
	}
}

func TestRevokeUnknownSubscriber(t *testing.T) {
	f, _ := NewFunctionKeys(nil)
	if _, err := f.Revoke("nobody"); err == nil {
		t.Fatal("revoking an unknown subscriber succeeded")
	}
	if f.Epoch() != 0 {
		t.Fatalf("a failed revocation changed the epoch to %d", f.Epoch())
	}
}

// A FunctionKeys exported after every step and restored (the Garbler's persisted function
// record, one restore per request) allocates exactly the rounds and seeds of one that was
// never exported, and a revocation over restored subscribers (Known) re-grants the remaining
// one only: it unmasks the next output, the revoked one gets ErrEpoch.
func TestFunctionKeysExportRestoreContinues(t *testing.T) {
	live, err := NewFunctionKeys(nil)
	if err != nil {
		t.Fatal(err)
	}
	epoch, round, key := live.Export()
	for i := range 5 {
		r := RestoreFunctionKeys(nil, epoch, round, &key)
		e1, r1, s1 := r.AllocateRound()
		e2, r2, s2 := live.AllocateRound()
		if e1 != e2 || r1 != r2 || s1 != s2 || r1 != uint64(i) {
			t.Fatalf("allocation %d: restored (%d, %d), live (%d, %d), seeds equal %v", i, e1, r1, e2, r2, s1 == s2)
		}
		epoch, round, key = r.Export()
		r.Zero()
	}

	aC, aG := subscriberOf(t)
	bC, bG := subscriberOf(t)
	adA, adB := []byte("fn|A"), []byte("fn|B")
	subA, subB := NewSubscription(4), NewSubscription(4)
	r := RestoreFunctionKeys(nil, epoch, round, &key)
	sealedA, _ := r.Subscribe("A", &aG, adA)
	sealedB, _ := r.Subscribe("B", &bG, adB)
	accept(t, subA, &aC, sealedA, adA)
	accept(t, subB, &bC, sealedB, adB)
	epoch, round, key = r.Export()
	r.Zero()

	r = RestoreFunctionKeys(nil, epoch, round, &key)
	r.Known("A", &aG, adA)
	r.Known("B", &bG, adB)
	grants, err := r.Revoke("B")
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 1 || grants["A"] == nil || r.Epoch() != epoch+1 {
		t.Fatalf("regrants %v at epoch %d, want one for A at epoch %d", len(grants), r.Epoch(), epoch+1)
	}
	accept(t, subA, &aC, grants["A"], adA)
	o := []byte{0x5a, 0xa5}
	e, rd, masked := execute(r, o, 16)
	if got, err := subA.Unmask(e, rd, masked, 16); err != nil || !bytes.Equal(got, o) {
		t.Errorf("remaining subscriber: %x, %v", got, err)
	}
	if _, err := subB.Unmask(e, rd, masked, 16); !errors.Is(err, ErrEpoch) {
		t.Errorf("revoked subscriber: %v, want ErrEpoch", err)
	}
	r.Zero()
	if _, _, k := r.Export(); k != (Seed{}) {
		t.Error("Zero left the ratchet key")
	}
}
