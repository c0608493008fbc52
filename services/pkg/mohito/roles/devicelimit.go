package roles

import (
	"sync"
	"time"
)

// Per-device publish limit of the vendor agent (issue 15 #2). nats-server limits no user's
// publish rate, so a device could flood its own response subject without bound; its own
// credential only makes the flood its own. An honest device answers once per round, so the
// default allows DefaultDeviceRoundsRate answers per round period and a burst of
// DefaultDeviceBurst; what exceeds it is dropped before any decoding and counted as
// mohito_dropped_total{reason="device_rate"}.
const (
	DefaultDeviceBurst      = 16
	DefaultDeviceRoundsRate = 4
)

// DeviceRate is the default refill of a device's bucket: DefaultDeviceRoundsRate answers per
// round period, at least one a second.
func DeviceRate(round time.Duration) float64 {
	if round <= 0 {
		return DefaultDeviceRoundsRate
	}
	return max(DefaultDeviceRoundsRate/round.Seconds(), 1)
}

// deviceLimiter is one token bucket per registered device (by its index): burst answers at
// once, then rate per second.
type deviceLimiter struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[int]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newDeviceLimiter(rate float64, burst int, now func() time.Time) *deviceLimiter {
	if now == nil {
		now = time.Now
	}
	return &deviceLimiter{rate: rate, burst: float64(burst), now: now, buckets: map[int]*bucket{}}
}

// allow takes one token from device d's bucket, false when it is empty.
func (l *deviceLimiter) allow(d int) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[d]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[d] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
