package roundstate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// RedisPersistence is the integrator's redis-server persistence (docs/services.md, "Durability
// per round"): the append-only file, fsynced before every reply. The gateway acknowledges a
// Submit once Admit has returned, so an admission Redis answered must survive a crash of the
// server and of its node; `everysec` would lose up to a second of them on a node crash.
var RedisPersistence = []string{"--appendonly", "yes", "--appendfsync", "always"}

// TestAdmissionsSurviveRedisKill: writers admit commands into one round while redis-server is
// killed (SIGKILL) under them; after a restart on the same directory every admission Admit
// acknowledged is there, with its index, user and M1. Without the append-only file the same
// kill loses them all — the check is not vacuous.
func TestAdmissionsSurviveRedisKill(t *testing.T) {
	t.Run("appendonly", func(t *testing.T) {
		acked, got := admitThroughKill(t, RedisPersistence...)
		if len(acked) < 100 {
			t.Fatalf("%d admissions acknowledged before the kill, want at least 100", len(acked))
		}
		for idx, a := range acked {
			g, ok := got[idx]
			if !ok {
				t.Fatalf("acknowledged admission %d (%s) lost in the restart", idx, a.User)
			}
			if g.User != a.User || string(g.M1) != string(a.M1) {
				t.Fatalf("admission %d: %s %q after the restart, %s %q acknowledged", idx, g.User, g.M1, a.User, a.M1)
			}
		}
		t.Logf("%d admissions acknowledged before the kill, %d after the restart", len(acked), len(got))
	})
	t.Run("in-memory control", func(t *testing.T) {
		acked, got := admitThroughKill(t)
		if len(acked) < 100 || len(got) != 0 {
			t.Fatalf("without persistence: %d acknowledged, %d after the restart; want ≥ 100 and 0", len(acked), len(got))
		}
	})
}

// admitThroughKill admits into round 7 from four writers, kills redis-server once at least 100
// admissions are acknowledged (the writers still running), restarts it, and returns the
// acknowledged admissions and what Admitted reads after the restart, by index.
func admitThroughKill(t *testing.T, args ...string) (acked, got map[uint32]roundstate.Admission) {
	const round = 7
	r := testenv.StartRedis(t, args...)
	s := roundstate.NewRedis(r.Client(), 5*time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	acked = map[uint32]roundstate.Admission{}
	enough := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				user := fmt.Sprintf("user-%d-%d", w, i)
				m1 := fmt.Appendf(nil, "m1 of %s", user)
				idx, err := s.Admit(ctx, round, user, 1, m1)
				if err != nil {
					return // the server is gone: nothing more is acknowledged
				}
				mu.Lock()
				acked[idx] = roundstate.Admission{Index: idx, User: user, M1: m1}
				if len(acked) == 100 {
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("fewer than 100 admissions in 30 s")
	}
	r.Kill(t)
	wg.Wait()
	r.Restart(t)
	var list []roundstate.Admission
	testenv.Eventually(t, 15*time.Second, "admissions readable after the restart", func() error {
		var err error
		list, err = s.Admitted(t.Context(), round)
		return err
	})
	got = map[uint32]roundstate.Admission{}
	for _, a := range list {
		got[a.Index] = a
	}
	return acked, got
}
