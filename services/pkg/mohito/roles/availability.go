package roles

import (
	"sync"
	"time"
)

// availability is the coordinator's view of which vendors can shuffle now
// (spec O4: skip vendors that are unavailable). A round whose V* did not
// answer in time is aborted — never processed without its shuffler (G7) —
// and its vendor sits out of the rotation for a back-off that doubles with
// each consecutive failure (from 4 periods up to MaxShufflerBackoff); one
// round it shuffles to the end brings it back at once. Only the shufflers'
// own behaviour moves it, never user data, and the rotation stays the
// smooth weighted round-robin over the vendors that are in.
type availability struct {
	mu      sync.Mutex
	first   time.Duration // the first back-off
	until   []time.Time   // out of the rotation until then
	marked  []time.Time   // when the vendor was last taken out
	backoff []time.Duration
}

// MaxShufflerBackoff bounds how long an unresponsive vendor sits out before
// it is tried again.
const MaxShufflerBackoff = 5 * time.Minute

func newAvailability(vendors int, period time.Duration) *availability {
	return &availability{first: 4 * period, until: make([]time.Time, vendors), marked: make([]time.Time, vendors), backoff: make([]time.Duration, vendors)}
}

// failed records that v did not answer as V* of a round opened at opened; it
// returns how long v sits out. The rounds v was chosen for before it was
// taken out fail together (their timeouts run in parallel): they are one
// failure, not one doubling each.
func (a *availability) failed(v int, opened, now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if opened.Before(a.marked[v]) {
		return a.until[v].Sub(now)
	}
	b := min(max(2*a.backoff[v], a.first), MaxShufflerBackoff)
	a.backoff[v], a.until[v], a.marked[v] = b, now.Add(b), now
	return b
}

// ok records that v shuffled a round to the end.
func (a *availability) ok(v int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.backoff[v], a.until[v] = 0, time.Time{}
}

// out reports whether v sits out of the rotation at now.
func (a *availability) out(v int, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return now.Before(a.until[v])
}
