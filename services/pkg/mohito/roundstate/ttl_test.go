package roundstate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestAdmitKeysExpire: every key an admission writes carries the store's TTL — the admission
// script sets it when it creates a key (not on every admission), so a round's keys never
// outlive it, whichever admission created them (the first of the round, a user's first, a
// refused one).
func TestAdmitKeysExpire(t *testing.T) {
	rc := testenv.StartRedis(t).Client()
	s := roundstate.NewRedis(rc, time.Minute)
	ctx := context.Background()
	// Round 3: a refused admission first (q = 0 creates the seen set and the user's quota
	// and nothing else), then admissions of two users, one over its quota, and a replay.
	if _, err := s.Admit(ctx, 3, "u0", 0, []byte("refused")); err != roundstate.ErrRateLimit {
		t.Fatalf("admit with q = 0: %v, want ErrRateLimit", err)
	}
	for k := range 3 {
		for u := range 2 {
			_, err := s.Admit(ctx, 3, fmt.Sprintf("u%d", u+1), 2, []byte{byte(u), byte(k)})
			if want := k < 2; (err == nil) != want {
				t.Fatalf("admit %d of u%d: %v", k, u+1, err)
			}
		}
	}
	if _, err := s.Admit(ctx, 3, "u1", 2, []byte{0, 0}); err != roundstate.ErrDuplicate {
		t.Fatalf("replay: %v, want ErrDuplicate", err)
	}
	keys, err := rc.Keys(ctx, "I:3:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// seen, seq, m1, user and the quotas of u0, u1, u2.
	if len(keys) != 7 {
		t.Fatalf("round keys %v, want 7", keys)
	}
	for _, k := range keys {
		ttl, err := rc.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s: TTL %v (%v), want (0, 1m]", k, ttl, err)
		}
	}
}
