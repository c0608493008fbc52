package roles

import (
	"testing"
	"time"
)

// TestSchedulerDutyProportionalToWeight is spec §9 #20: over whole cycles of
// the smooth weighted round-robin every vendor shuffles exactly in
// proportion to its weight, a vendor of weight 0 never, and a vendor that is
// skipped as unavailable gives its turns to the others without the rotation
// ever running out of shufflers.
func TestSchedulerDutyProportionalToWeight(t *testing.T) {
	weights := []int{5, 0, 3, 1, 7}
	total := 16
	s := NewScheduler(weights)
	count := make([]int, len(weights))
	const cycles = 50
	for range cycles * total {
		count[s.Next(nil)]++
	}
	for v, w := range weights {
		if count[v] != cycles*w {
			t.Errorf("vendor %d (weight %d) shuffled %d of %d rounds, want %d", v, w, count[v], cycles*total, cycles*w)
		}
	}
	// Within any window of one cycle no vendor runs ahead of its share by
	// more than one turn (the "smooth" of the round-robin).
	s = NewScheduler(weights)
	seq := make([]int, 3*total)
	for i := range seq {
		seq[i] = s.Next(nil)
	}
	for start := 0; start+total <= len(seq); start++ {
		c := make([]int, len(weights))
		for _, v := range seq[start : start+total] {
			c[v]++
		}
		for v, w := range weights {
			if c[v] > w+1 || c[v] < w-1 {
				t.Fatalf("window at %d: vendor %d shuffled %d times, weight %d", start, v, c[v], w)
			}
		}
	}

	// Vendor 4 unavailable: never chosen, the rest keep their proportions.
	s = NewScheduler(weights)
	count = make([]int, len(weights))
	rest := total - weights[4]
	for range cycles * rest {
		count[s.Next(func(v int) bool { return v == 4 })]++
	}
	if count[4] != 0 || count[1] != 0 {
		t.Fatalf("skipped or zero-weight vendor chosen: %v", count)
	}
	for _, v := range []int{0, 2, 3} {
		if lo, hi := cycles*weights[v]-1, cycles*weights[v]+1; count[v] < lo || count[v] > hi {
			t.Errorf("with vendor 4 out, vendor %d shuffled %d times, want ≈ %d", v, count[v], cycles*weights[v])
		}
	}
	// Every vendor of positive weight unavailable: a round still gets a
	// shuffler of positive weight (it may abort, it is never skipped).
	if v := s.Next(func(int) bool { return true }); weights[v] == 0 {
		t.Fatalf("all skipped: chose vendor %d of weight 0", v)
	}
}

// TestAvailabilityBackoff: a vendor that did not answer sits out for 4
// periods, doubling with each later failure up to MaxShufflerBackoff; the
// rounds it was chosen for before it was taken out count as one failure; a
// round shuffled to the end brings it back at once.
func TestAvailabilityBackoff(t *testing.T) {
	const period = 250 * time.Millisecond
	a := newAvailability(3, period)
	t0 := time.Unix(1_750_000_000, 0)
	if a.out(1, t0) {
		t.Fatal("out before any failure")
	}
	if b := a.failed(1, t0.Add(-time.Second), t0); b != 4*period {
		t.Fatalf("first back-off %v, want %v", b, 4*period)
	}
	// Two more rounds opened before t0 fail later: still one failure.
	a.failed(1, t0.Add(-500*time.Millisecond), t0.Add(100*time.Millisecond))
	a.failed(1, t0.Add(-100*time.Millisecond), t0.Add(200*time.Millisecond))
	if !a.out(1, t0.Add(4*period-time.Millisecond)) || a.out(1, t0.Add(4*period)) {
		t.Fatal("not out for exactly the first back-off")
	}
	if a.out(0, t0) || a.out(2, t0) {
		t.Fatal("other vendors out")
	}
	now := t0.Add(4 * period)
	want := 8 * period
	for range 12 {
		if b := a.failed(1, now, now.Add(time.Millisecond)); b != want {
			t.Fatalf("back-off %v, want %v", b, want)
		}
		now = now.Add(time.Second)
		want = min(2*want, MaxShufflerBackoff)
	}
	a.ok(1)
	if a.out(1, now) {
		t.Fatal("still out after a round shuffled to the end")
	}
	if b := a.failed(1, now, now.Add(time.Millisecond)); b != 4*period {
		t.Fatalf("back-off after recovery %v, want %v", b, 4*period)
	}
}
