package roles

import (
	"errors"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pda/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestPoolRetentionNeverChangedByARole (issue 15 item 8): a role whose job has another window
// than the live pool stream's — its retention 2 × window + grace differs — is refused with
// ErrRetentionChange and the stream keeps its max age; CreateOrUpdateStream used to rewrite it
// silently, so one misconfigured role changed how long every role's pooled items lived. The same
// retention again passes, and a short window (retention below the 10-minute duplicate window)
// gets a stream whose duplicate window is capped at its max age.
func TestPoolRetentionNeverChangedByARole(t *testing.T) {
	n := testenv.StartNATS(t)
	js := n.JetStream(t)
	ctx := t.Context()
	short := (&Job{WindowLength: 2 * time.Second, Grace: time.Second}).PoolRetention()
	if err := EnsureProxyDomain(ctx, js, short); err != nil {
		t.Fatalf("a 2 s window: %v", err)
	}
	s, err := js.Stream(ctx, contract.PoolStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxAge != short || c.Duplicates != short {
		t.Fatalf("pool max age %v, duplicates %v: want %v for both", c.MaxAge, c.Duplicates, short)
	}
	if err := EnsureProxyDomain(ctx, js, short); err != nil {
		t.Fatalf("the same retention again: %v", err)
	}
	for _, other := range []time.Duration{2*time.Hour + 30*time.Second, time.Second} {
		err := EnsureProxyDomain(ctx, js, other)
		if !errors.Is(err, ErrRetentionChange) {
			t.Fatalf("retention %v over a live %v: %v, want ErrRetentionChange", other, short, err)
		}
		s, err := js.Stream(ctx, contract.PoolStream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.MaxAge; got != short {
			t.Fatalf("a role with retention %v changed the live pool's max age to %v", other, got)
		}
	}
}
