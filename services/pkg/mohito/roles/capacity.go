package roles

import (
	"fmt"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
	"github.com/obscura-iot/obscura/services/pkg/mohito/contract"
)

// CapacityClasses is the parsed contract.CapacityClasses.
type CapacityClasses struct {
	Percent        []int
	Hold           time.Duration
	BurstRate      float64
	LowerFakeRatio float64
}

// CapacityChange is one move of the series' capacity class, with the figures that caused it.
type CapacityChange struct {
	At                 time.Time
	From, To           int // class indices
	FromPercent        int
	ToPercent          int
	Rounds             int     // rounds observed since the previous change
	BurstRate          float64 // share of them that burst (S > 0)
	MinFakeRatio       float64 // the least share of fakes among them
	Raised, HasChanged bool
}

// capacityClass moves the series' targets between the size classes of a CapacityClasses policy
// (spec §3.8, App. B, G5; issue 14 item 1). It sees only what the coordinator already sees per
// round — whether the round burst (S > 0) and its share of fakes (N − valid)/N — so the class is
// one for the series. What the class sequence reveals: the integrator chooses it, so nothing to
// the integrator; V* sees B_v = C_v − A_v grow or shrink by about the class step when the class
// changes, so it learns that aggregate demand crossed a threshold, at most once per hold (it
// already observes every round's bursts and fakes); vendors see K_v, which no class changes, and
// the device count of their own tables as before.
type capacityClass struct {
	cls *CapacityClasses

	mu      sync.Mutex
	idx     int
	since   time.Time // of the last change (or of the start)
	rounds  int
	bursts  int
	minFake float64
}

func newCapacityClass(cls *CapacityClasses, now time.Time, idx int) *capacityClass {
	if cls == nil {
		return nil
	}
	idx = min(max(idx, 0), len(cls.Percent)-1)
	return &capacityClass{cls: cls, idx: idx, since: now, minFake: 1}
}

// policy is the draw policy of the current class: base_v scaled, widths as set.
func (c *capacityClass) policy(base []mohito.TargetPolicy) []mohito.TargetPolicy {
	if c == nil {
		return base
	}
	c.mu.Lock()
	pct := c.cls.Percent[c.idx]
	c.mu.Unlock()
	out := make([]mohito.TargetPolicy, len(base))
	for v, p := range base {
		out[v] = mohito.TargetPolicy{Base: contract.ScaledBase(p.Base, pct), Width: p.Width}
	}
	return out
}

// class is the current class index and percent.
func (c *capacityClass) class() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idx, c.cls.Percent[c.idx]
}

// observe takes a planned round (n entries of which valid real messages, burst excess s) and
// moves the class when the policy says so.
func (c *capacityClass) observe(now time.Time, n, valid, s int) CapacityChange {
	if c == nil || n <= 0 {
		return CapacityChange{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds++
	if s > 0 {
		c.bursts++
	}
	c.minFake = min(c.minFake, float64(n-valid)/float64(n))
	if now.Sub(c.since) < c.cls.Hold {
		return CapacityChange{}
	}
	ch := CapacityChange{At: now, From: c.idx, FromPercent: c.cls.Percent[c.idx], Rounds: c.rounds,
		BurstRate: float64(c.bursts) / float64(c.rounds), MinFakeRatio: c.minFake}
	switch {
	case ch.BurstRate > c.cls.BurstRate && c.idx < len(c.cls.Percent)-1:
		c.idx++
		ch.Raised = true
	case c.bursts == 0 && c.minFake >= c.cls.LowerFakeRatio && c.idx > 0:
		c.idx--
	default:
		// No change: the observation window slides (a new one starts), so a decision always
		// rests on at least one hold of rounds.
		c.since, c.rounds, c.bursts, c.minFake = now, 0, 0, 1
		return CapacityChange{}
	}
	ch.To, ch.ToPercent, ch.HasChanged = c.idx, c.cls.Percent[c.idx], true
	c.since, c.rounds, c.bursts, c.minFake = now, 0, 0, 1
	return ch
}

func (ch CapacityChange) String() string {
	verb := "lowered"
	if ch.Raised {
		verb = "raised"
	}
	return fmt.Sprintf("capacity class %s from %d%% to %d%% of base after %d rounds: %.1f%% burst, fakes ≥ %.1f%%",
		verb, ch.FromPercent, ch.ToPercent, ch.Rounds, 100*ch.BurstRate, 100*ch.MinFakeRatio)
}
