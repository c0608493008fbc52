package pps

import (
	"errors"
	"testing"
)

func testSeed(b byte) *Seed {
	var s Seed
	for i := range s {
		s[i] = b + byte(i)
	}
	return &s
}

func TestNewRatchetTakesTheKeyOver(t *testing.T) {
	k := testSeed(1)
	NewRatchet(k, 0, RatchetOptions{})
	if *k != (Seed{}) {
		t.Fatalf("caller's K_0 not zeroised: %x", k)
	}
}

func TestRatchetAdvanceToMatchesAdvance(t *testing.T) {
	a := NewRatchet(testSeed(2), 5, RatchetOptions{})
	b := NewRatchet(testSeed(2), 5, RatchetOptions{})
	for k := uint64(5); k < 40; k++ {
		want := a.Seed()
		got, err := b.AdvanceTo(k)
		if err != nil || got != want {
			t.Fatalf("AdvanceTo(%d) = %x, %v; stepwise %x", k, got, err, want)
		}
		a.Advance()
	}
	if b.Round() != 39 {
		t.Fatalf("AdvanceTo left the ratchet at %d, want 39 (it stays at the requested round)", b.Round())
	}
}

func TestRatchetRoundsDiffer(t *testing.T) {
	r := NewRatchet(testSeed(3), 0, RatchetOptions{})
	seen := map[Seed]uint64{}
	for i := range uint64(1000) {
		s := r.Seed()
		if j, ok := seen[s]; ok {
			t.Fatalf("seed of round %d repeats round %d", i, j)
		}
		seen[s] = i
		r.Advance()
	}
}

func TestRatchetHasNoBackwardPath(t *testing.T) {
	r := NewRatchet(testSeed(4), 0, RatchetOptions{})
	s3, _ := r.AdvanceTo(3)
	r.Advance()
	for k := range uint64(4) {
		if _, err := r.AdvanceTo(k); !errors.Is(err, ErrRoundErased) {
			t.Errorf("round %d behind a ratchet at 4 without retention: %v, want ErrRoundErased", k, err)
		}
	}
	// A ratchet rebuilt from K_4 alone reproduces nothing of round 3.
	k4, round := r.Export()
	r2 := NewRatchet(&k4, round, RatchetOptions{Retain: 100})
	if _, err := r2.AdvanceTo(3); !errors.Is(err, ErrRoundErased) {
		t.Errorf("round 3 from K_4: %v, want ErrRoundErased", err)
	}
	for k := uint64(4); k < 50; k++ {
		if s, _ := r2.AdvanceTo(k); s == s3 {
			t.Fatalf("round %d from K_4 reproduces s_3", k)
		}
	}
}

func TestRatchetRetainsAndReleases(t *testing.T) {
	ref := NewRatchet(testSeed(5), 0, RatchetOptions{})
	var want [10]Seed
	for i := range want {
		want[i] = ref.Seed()
		ref.Advance()
	}
	r := NewRatchet(testSeed(5), 0, RatchetOptions{Retain: 4})
	if _, err := r.AdvanceTo(9); err != nil {
		t.Fatal(err)
	}
	if r.Retained() != 4 {
		t.Fatalf("retained %d seeds, want the bound 4", r.Retained())
	}
	for k := range uint64(9) {
		s, err := r.AdvanceTo(k)
		switch {
		case k >= 5 && (err != nil || s != want[k]):
			t.Errorf("retained round %d: %x, %v; want %x", k, s, err, want[k])
		case k < 5 && !errors.Is(err, ErrRoundErased):
			t.Errorf("round %d past the bound: %v, want ErrRoundErased", k, err)
		}
	}
	r.Release(6)
	if _, err := r.AdvanceTo(6); !errors.Is(err, ErrRoundErased) {
		t.Errorf("released round 6: %v, want ErrRoundErased", err)
	}
	if r.Retained() != 3 {
		t.Errorf("retained %d after a release, want 3", r.Retained())
	}
	// Releasing many rounds while advancing keeps the bookkeeping bounded.
	for k := uint64(10); k < 10000; k++ {
		r.AdvanceTo(k)
		r.Release(k - 1)
	}
	if len(r.order) > 2*4+16+1 || r.Retained() > 4 {
		t.Errorf("cache bookkeeping grew: order %d, retained %d", len(r.order), r.Retained())
	}
}

func TestRatchetZeroisesErasedState(t *testing.T) {
	r := NewRatchet(testSeed(6), 0, RatchetOptions{Retain: 2})
	keyBefore := r.key
	keyMem := &r.key
	r.Advance()
	if r.key == keyBefore || keyMem != &r.key {
		t.Fatalf("Advance did not overwrite K_0 in place")
	}
	r.AdvanceTo(3)
	cached := r.cache[1]
	if cached == nil || *cached == (Seed{}) {
		t.Fatalf("round 1 not retained")
	}
	r.Release(1)
	if *cached != (Seed{}) {
		t.Errorf("released seed not zeroised: %x", *cached)
	}
	evicted := r.cache[2]
	r.AdvanceTo(5) // caches 3 and 4, evicting 2
	if *evicted != (Seed{}) {
		t.Errorf("evicted seed not zeroised: %x", *evicted)
	}
	held := []*Seed{r.cache[3], r.cache[4]}
	r.Zero()
	if r.key != (Seed{}) || *held[0] != (Seed{}) || *held[1] != (Seed{}) {
		t.Errorf("Zero left key or seeds behind")
	}
}

func TestRatchetMaxSkip(t *testing.T) {
	tests := []struct {
		name    string
		maxSkip uint64
		to      uint64
		wantErr error
	}{
		{"within the bound", 100, 100, nil},
		{"one past the bound", 100, 101, ErrRoundTooFar},
		{"a hostile round number", 0, 1 << 62, ErrRoundTooFar},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRatchet(testSeed(7), 0, RatchetOptions{MaxSkip: tt.maxSkip})
			_, err := r.AdvanceTo(tt.to)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("AdvanceTo(%d): %v, want %v", tt.to, err, tt.wantErr)
			}
			if tt.wantErr != nil && r.Round() != 0 {
				t.Fatalf("a refused AdvanceTo moved the ratchet to %d", r.Round())
			}
		})
	}
}
