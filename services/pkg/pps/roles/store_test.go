package roles

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/pps/contract"
	"github.com/obscura-iot/obscura/services/testenv"
)

const storeTestPub = "aa00000000000000000000000000000000000000000000000000000000000000"

func TestBrokerStoreRejectsUnknownAndReplayedRounds(t *testing.T) {
	ctx := context.Background()
	s := NewBrokerStore(testenv.StartRedis(t).Client(), time.Hour)
	now := time.Unix(1_700_000_000, 0)
	if err := s.StoreLabels(ctx, storeTestPub, 1, []byte("x"), now); !errors.Is(err, ErrUnknownPublisher) {
		t.Fatalf("labels of an unregistered publisher: %v, want ErrUnknownPublisher", err)
	}
	if err := s.RegisterPublisher(ctx, storeTestPub, contract.Policy{Fns: []string{"f"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		round uint64
		want  error
	}{{5, nil}, {5, ErrReplay}, {4, ErrReplay}, {6, nil}, {1 << 62, nil}, {1<<62 - 1, ErrReplay}} {
		if err := s.StoreLabels(ctx, storeTestPub, tc.round, []byte{byte(tc.round)}, now); !errors.Is(err, tc.want) {
			t.Errorf("round %d: %v, want %v", tc.round, err, tc.want)
		}
	}
	// A replay did not overwrite what the first message stored.
	if b, _ := s.Labels(ctx, storeTestPub, 5); !bytes.Equal(b, []byte{5}) {
		t.Errorf("labels of round 5 = %x after replays, want 05", b)
	}
	// A new hello is a new ratchet from round 0: the history goes.
	if err := s.RegisterPublisher(ctx, storeTestPub, contract.Policy{Fns: []string{"f"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLabels(ctx, storeTestPub, 0, []byte{0}, now); err != nil {
		t.Errorf("round 0 after re-registration: %v", err)
	}
}

func TestBrokerStoreLatestRoundWithinWindow(t *testing.T) {
	ctx := context.Background()
	s := NewBrokerStore(testenv.StartRedis(t).Client(), time.Hour)
	if err := s.RegisterPublisher(ctx, storeTestPub, contract.Policy{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for r := uint64(0); r < 5; r++ {
		if err := s.StoreLabels(ctx, storeTestPub, r, []byte{byte(r)}, t0.Add(time.Duration(r)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		since, until time.Duration
		round        uint64
		ok           bool
	}{
		{0, 10 * time.Minute, 4, true},
		{0, 2 * time.Minute, 2, true},                    // later rounds had not arrived at the tick
		{150 * time.Second, 170 * time.Second, 0, false}, // nothing arrived in the window
		{-time.Hour, -time.Minute, 0, false},
	} {
		r, ok, err := s.LatestRound(ctx, storeTestPub, t0.Add(tc.since), t0.Add(tc.until))
		if err != nil || ok != tc.ok || r != tc.round {
			t.Errorf("latest in [%v, %v] = %d %v %v, want %d %v", tc.since, tc.until, r, ok, err, tc.round, tc.ok)
		}
	}
}

func TestBrokerStoreTickClaimedOnceByLeaseHolder(t *testing.T) {
	ctx := context.Background()
	s := NewBrokerStore(testenv.StartRedis(t).Client(), time.Hour)
	a, ok, err := s.AcquireLeader(ctx, "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("first replica: %v %v", ok, err)
	}
	if _, ok, err := s.AcquireLeader(ctx, "b", time.Minute); err != nil || ok {
		t.Fatalf("second replica took a held lease: %v %v", ok, err)
	}
	if ok, err := s.ClaimTick(ctx, a, "fn", 7); err != nil || !ok {
		t.Fatalf("claim tick 7: %v %v", ok, err)
	}
	for _, tick := range []uint64{7, 6} {
		if ok, err := s.ClaimTick(ctx, a, "fn", tick); err != nil || ok {
			t.Errorf("tick %d claimed again: %v %v", tick, ok, err)
		}
	}
	if err := s.ReleaseLeader(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, ok, err := s.AcquireLeader(ctx, "b", time.Minute)
	if err != nil || !ok {
		t.Fatalf("standby after release: %v %v", ok, err)
	}
	// The deposed leader's token is fenced off: it can neither claim nor renew.
	if _, err := s.ClaimTick(ctx, a, "fn", 8); !errors.Is(err, ErrNotLeader) {
		t.Errorf("deposed leader claims: %v, want ErrNotLeader", err)
	}
	if ok, err := s.RenewLeader(ctx, a, time.Minute); err != nil || ok {
		t.Errorf("deposed leader renews: %v %v", ok, err)
	}
	if ok, err := s.ClaimTick(ctx, b, "fn", 7); err != nil || ok {
		t.Errorf("new leader re-ran tick 7: %v %v", ok, err)
	}
	if ok, err := s.ClaimTick(ctx, b, "fn", 8); err != nil || !ok {
		t.Errorf("new leader claims tick 8: %v %v", ok, err)
	}
}
