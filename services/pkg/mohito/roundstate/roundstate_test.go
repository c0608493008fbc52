package roundstate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito/roundstate"
	"github.com/obscura-iot/obscura/services/testenv"
)

// TestStores runs the same contract against redis-server and the in-memory twin.
func TestStores(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) roundstate.Store{
		"redis": func(t *testing.T) roundstate.Store {
			return roundstate.NewRedis(testenv.StartRedis(t).Client(), time.Minute)
		},
		"memory": func(*testing.T) roundstate.Store { return roundstate.NewMemory(8) },
	} {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			// Concurrent admission assigns distinct dense indices and enforces q.
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[uint32]bool{}
			limited := 0
			for u := range 20 {
				for k := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						i, err := s.Admit(ctx, 7, fmt.Sprintf("u%d", u), 2, []byte{byte(u), byte(k)})
						mu.Lock()
						defer mu.Unlock()
						if errors.Is(err, roundstate.ErrRateLimit) {
							limited++
							return
						}
						if err != nil || got[i] {
							t.Errorf("admit: %d %v", i, err)
						}
						got[i] = true
					}()
				}
			}
			wg.Wait()
			if len(got) != 40 || limited != 20 {
				t.Fatalf("admitted %d, limited %d; want 40, 20", len(got), limited)
			}
			// A replayed envelope (issue 15 #1) is refused in its round under
			// any user, the submitter's own included, without using a quota;
			// the same bytes in another round are a new submission.
			adm, err := s.Admitted(ctx, 7)
			if err != nil || len(adm) != 40 {
				t.Fatalf("admitted = %d, %v", len(adm), err)
			}
			for _, u := range []string{"u99", adm[0].User} {
				if _, err := s.Admit(ctx, 7, u, 2, adm[0].M1); !errors.Is(err, roundstate.ErrDuplicate) {
					t.Fatalf("replay of index 0's envelope by %s: %v, want ErrDuplicate", u, err)
				}
			}
			if _, err := s.Admit(ctx, 8, "u99", 2, adm[0].M1); err != nil {
				t.Fatalf("same bytes in round 8: %v", err)
			}
			// One call marks a forwarded batch.
			if err := s.MarkForwarded(ctx, 7, 3, 5, 6); err != nil {
				t.Fatal(err)
			}
			k, err := s.Close(ctx, 7)
			if err != nil || k != 40 {
				t.Fatalf("close = %d, %v", k, err)
			}
			if _, err := s.Admit(ctx, 7, "late", 2, nil); !errors.Is(err, roundstate.ErrClosed) {
				t.Fatalf("admit after close: %v", err)
			}
			adm, err = s.Admitted(ctx, 7)
			if err != nil || len(adm) != 40 || !adm[3].Forwarded || adm[4].Forwarded || !adm[5].Forwarded || !adm[6].Forwarded {
				t.Fatalf("admitted = %d, %v", len(adm), err)
			}
			users, err := s.Users(ctx, 7, 0, 42) // two past the last index
			if err != nil || len(users) != 42 || users[40] != "" || users[41] != "" {
				t.Fatalf("users = %q, %v", users, err)
			}
			for i, a := range adm {
				if a.Index != uint32(i) {
					t.Fatal("admissions not by index")
				}
				if u := users[a.Index]; u != a.User || a.User != fmt.Sprintf("u%d", a.M1[0]) {
					t.Fatal("index → user mapping broken")
				}
			}
			if u, _ := s.Users(ctx, 7, 39, 1); len(u) != 1 || u[0] != adm[39].User {
				t.Fatalf("users from 39 = %q", u)
			}
			// A round without a real command gets one empty M10 batch; its lookup must succeed
			// (an empty HMGET is a Redis error, and the round never completed).
			if u, err := s.Users(ctx, 9, 0, 0); err != nil || len(u) != 0 {
				t.Fatalf("users of an empty batch = %q, %v; want none, no error", u, err)
			}
			s.PutSlots(ctx, 7, 2, []byte("slots"))
			if b, _ := s.Slots(ctx, 7, 2); !bytes.Equal(b, []byte("slots")) {
				t.Fatal("slots")
			}
			if _, err := s.Slots(ctx, 7, 1); !errors.Is(err, roundstate.ErrNotFound) {
				t.Fatal("missing slots")
			}
			s.SetStatus(ctx, 7, roundstate.StatusAborted)
			if st, _ := s.Status(ctx, 7); st != roundstate.StatusAborted {
				t.Fatal("status")
			}
			if err := s.PutResponses(ctx, 7, []roundstate.Mail{{User: "u1", Index: 5, M11: []byte("m11")}, {User: "u3", Index: 6, M11: []byte("m11'")}}); err != nil {
				t.Fatal(err)
			}
			if b, _ := s.Response(ctx, "u1", 7, 5); !bytes.Equal(b, []byte("m11")) {
				t.Fatal("mailbox")
			}
			if _, err := s.Response(ctx, "u2", 7, 5); !errors.Is(err, roundstate.ErrNotFound) {
				t.Fatal("another user's mailbox")
			}
			// Concurrent reads (a released round wakes every parked Fetch) share round trips
			// and each gets its own answer.
			bad := make(chan string, 64)
			for j := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					user, i, want := "u1", uint32(5), "m11"
					if j%2 == 1 {
						user, i, want = "u3", 6, "m11'"
					}
					if j%8 == 7 {
						if _, err := s.Response(ctx, "u2", 7, 6); !errors.Is(err, roundstate.ErrNotFound) {
							bad <- fmt.Sprintf("missing response: %v", err)
						}
						return
					}
					if b, err := s.Response(ctx, user, 7, i); err != nil || string(b) != want {
						bad <- fmt.Sprintf("%s/%d: %q, %v", user, i, b, err)
					}
				}()
			}
			wg.Wait()
			close(bad)
			for b := range bad {
				t.Fatal(b)
			}
		})
	}
}
