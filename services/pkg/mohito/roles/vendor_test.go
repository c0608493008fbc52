package roles

import (
	"testing"
	"time"
)

// TestAgentDeliveryOrder is the vendor agent's delivery rule (VendorAgent.next): rounds go to
// devices strictly in round order, so a round whose table is late holds the later ones back —
// until the integrator would have aborted it, after which it is dead and no longer does; a
// delivered, aborted or stale round is never chosen.
func TestAgentDeliveryOrder(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := &VendorAgent{cfg: VendorConfig{Deployment: Deployment{
		Round: 2 * time.Second, ShufflerTimeout: 3 * time.Second, ResponseDeadline: time.Second,
	}}}
	hold := 2*time.Second + 3*time.Second + time.Second + time.Second
	table := []byte("M5")
	type round struct {
		age             time.Duration
		table           bool
		delivered, dead bool
		wantDead        bool
	}
	for _, tc := range []struct {
		name   string
		rounds map[uint64]round
		want   uint64 // 0: none
	}{
		{"oldest complete round first", map[uint64]round{
			7: {age: time.Second, table: true},
			8: {age: 0, table: true},
		}, 7},
		{"late table holds later rounds back", map[uint64]round{
			7: {age: hold - time.Second},
			8: {age: time.Second, table: true},
		}, 7},
		{"a table that cannot come any more does not", map[uint64]round{
			7: {age: hold + time.Second, wantDead: true},
			8: {age: time.Second, table: true},
		}, 8},
		{"a complete round is never dead by the hold", map[uint64]round{
			7: {age: hold + time.Minute, table: true},
			8: {age: time.Second, table: true},
		}, 7},
		{"stale rounds are dropped, table or not", map[uint64]round{
			6: {age: staleAfter + time.Second, table: true, wantDead: true},
			7: {age: time.Second, table: true},
		}, 7},
		{"delivered and aborted rounds are skipped", map[uint64]round{
			5: {age: time.Second, table: true, delivered: true},
			6: {age: time.Second, dead: true, wantDead: true},
			7: {age: time.Second},
		}, 7},
		{"nothing pending", map[uint64]round{
			5: {age: time.Second, delivered: true},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.rounds = map[uint64]*agentRound{}
			for rt, r := range tc.rounds {
				ar := &agentRound{first: now.Add(-r.age), delivered: r.delivered, dead: r.dead}
				if r.table {
					ar.table = table
				}
				a.rounds[rt] = ar
			}
			got, next := a.next(now)
			if (next == nil) != (tc.want == 0) || got != tc.want {
				t.Fatalf("next = %d (%v), want %d", got, next != nil, tc.want)
			}
			for rt, r := range tc.rounds {
				if a.rounds[rt].dead != r.wantDead {
					t.Errorf("round %d: dead = %v, want %v", rt, a.rounds[rt].dead, r.wantDead)
				}
			}
		})
	}
}
