package clock

import (
	"sync"
	"time"
)

// Manual is a clock that moves only when told to: Now stands still and a wait from After
// fires when Set moves the time past it. Simulations and tests drive a scheduler with it
// (the PPS broker's day ticks in the demo and its tests); the zero value starts at the zero
// time.
type Manual struct {
	mu    sync.Mutex
	now   time.Time
	waits []manualWait
}

type manualWait struct {
	at time.Time
	ch chan time.Time
}

// NewManual returns a Manual clock at now.
func NewManual(now time.Time) *Manual { return &Manual{now: now} }

// Now is the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it reaches Now()+d; d ≤ 0
// fires at once.
func (c *Manual) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waits = append(c.waits, manualWait{c.now.Add(d), ch})
	return ch
}

// Waiting is the number of pending waits due by at, so a driver can wait for a scheduler to
// be asleep before moving the time.
func (c *Manual) Waiting(at time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waits {
		if !w.at.After(at) {
			n++
		}
	}
	return n
}

// Set moves the clock to t and fires every wait due by then.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	keep := c.waits[:0]
	for _, w := range c.waits {
		if !w.at.After(t) {
			w.ch <- t
		} else {
			keep = append(keep, w)
		}
	}
	c.waits = keep
}
