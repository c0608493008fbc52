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

// TestBrokerStoreBatchedReads: the tick's batched reads (Policies, LatestRounds, LabelsOf in
// one MGET) answer as the single reads do: an unregistered publisher has no policy, a window
// in which nothing arrived no round, a round never stored (or of another publisher) no labels.
func TestBrokerStoreBatchedReads(t *testing.T) {
	ctx := context.Background()
	s := NewBrokerStore(testenv.StartRedis(t).Client(), time.Hour)
	other := "bb" + storeTestPub[2:]
	unknown := "cc" + storeTestPub[2:]
	if err := s.RegisterPublisher(ctx, storeTestPub, contract.Policy{Fns: []string{"f"}, MinInputs: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterPublisher(ctx, other, contract.Policy{Fns: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for r := uint64(1); r <= 4; r++ {
		if err := s.StoreLabels(ctx, storeTestPub, r, []byte{1, byte(r)}, t0.Add(time.Duration(r)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StoreLabels(ctx, other, 9, []byte{2, 9}, t0); err != nil {
		t.Fatal(err)
	}

	pols, err := s.Policies(ctx, []string{other, unknown, storeTestPub})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{other, unknown, storeTestPub} {
		want, werr := s.Policy(ctx, id)
		switch {
		case errors.Is(werr, ErrUnknownPublisher):
			if pols[i] != nil {
				t.Errorf("%s: unregistered, Policies gave %+v", id[:2], pols[i])
			}
		case werr != nil:
			t.Fatal(werr)
		case pols[i] == nil || pols[i].MinInputs != want.MinInputs || len(pols[i].Fns) != 1 || pols[i].Fns[0] != want.Fns[0]:
			t.Errorf("%s: Policies gave %+v, Policy %+v", id[:2], pols[i], want)
		}
	}

	qs := []RoundQuery{
		{storeTestPub, t0, t0.Add(10 * time.Minute)},
		{storeTestPub, t0, t0.Add(2 * time.Minute)},
		{storeTestPub, t0.Add(150 * time.Second), t0.Add(170 * time.Second)},
		{other, time.Time{}, t0},
		{unknown, time.Time{}, t0},
	}
	want := []LatestRoundOf{{4, true}, {2, true}, {}, {9, true}, {}}
	got, err := s.LatestRounds(ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range qs {
		if got[i] != want[i] {
			t.Errorf("query %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	refs := []LabelRef{{storeTestPub, 3}, {storeTestPub, 7}, {other, 9}, {other, 3}, {unknown, 1}, {storeTestPub, 1}}
	labels, err := s.LabelsOf(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range refs {
		one, err := s.Labels(ctx, r.Pub, r.Round)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(labels[i], one) || (labels[i] == nil) != (one == nil) {
			t.Errorf("%s round %d: LabelsOf %x, Labels %x", r.Pub[:2], r.Round, labels[i], one)
		}
	}
	if labels[0] == nil || labels[1] != nil {
		t.Errorf("LabelsOf: %x", labels)
	}
}
