package client

import (
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// TestRoundLearnedLateIsPassedOver: a round offered with its age at the gateway (a refusal's
// trailer, RoundInfo's header) counts its period from when it opened, not from when this client
// learned it — a round learned in its last quarter is passed over for the next — and a client
// whose submissions take longer than an eighth of a period keeps twice that as its margin; a
// round past its period waits a quarter period for its successor's push.
func TestRoundLearnedLateIsPassedOver(t *testing.T) {
	const period = time.Second
	feed := func(age time.Duration) (*roundFeed, *mohito.RoundInfo) {
		f := &roundFeed{changed: make(chan struct{})}
		f.offer(&mohito.RoundInfo{T: 1}, period+max(age, 0)) // round 1 opened a period before round 2
		ri := &mohito.RoundInfo{T: 2}
		f.offer(ri, age)
		return f, ri
	}
	if f, ri := feed(0); f.lateBy(ri) != 0 {
		t.Fatalf("a fresh round: wait %v, want 0", f.lateBy(ri))
	}
	if f, ri := feed(-1); f.lateBy(ri) != 0 {
		t.Fatalf("a pushed round (age unknown): wait %v, want 0", f.lateBy(ri))
	}
	f, ri := feed(900 * time.Millisecond)
	if w := f.lateBy(ri); w <= 0 || w > period/10+2*period/10 {
		t.Fatalf("a round learned 900 ms after it opened: wait %v, want the rest of its period and a little more", w)
	}
	// Past its period (the successor's push is late): wait a quarter period for it.
	f, ri = feed(1200 * time.Millisecond)
	if w := f.lateBy(ri); w < period/4 {
		t.Fatalf("a round 1.2 periods old: wait %v, want at least a quarter period", w)
	}
	// Half a period old: fine for a client that submits quickly, too late for one whose
	// submissions take 300 ms.
	f, ri = feed(period / 2)
	f.observeSubmit(10 * time.Millisecond)
	if w := f.lateBy(ri); w != 0 {
		t.Fatalf("half a period left, 10 ms submissions: wait %v, want 0", w)
	}
	f, ri = feed(period / 2)
	f.observeSubmit(300 * time.Millisecond)
	if w := f.lateBy(ri); w <= 0 {
		t.Fatalf("half a period left, 300 ms submissions: wait %v, want the next round", w)
	}
}
