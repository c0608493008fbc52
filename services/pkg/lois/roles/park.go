package roles

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// parkSlots bounds the packets a sender holds while pools are empty; parkSlotSize is one
// slot's buffer (a larger packet is dropped as exhausted at once).
const (
	parkSlots    = 32
	parkSlotSize = lois.Headroom + 2048
)

// parked is a packet held for a grant; ss is its SI session (nil at the DI).
type parked struct {
	buf      []byte
	n        int
	deadline time.Time
	ss       *serverSession
}

// parker holds the packets whose pool is empty for up to exhaust_queue_ms (spec §3.10,
// D-20): a grant wakes it and the held packets are hidden and sent in order; those still
// without a keystream at their deadline are dropped. Slots are allocated once.
type parker struct {
	free, in chan *parked
	grant    chan struct{}
	wait     time.Duration
	queued   prometheus.Counter
	send     func(*parked) bool // false: the pool is still empty
	drop     func(*parked)
}

func newParker(wait time.Duration, queued prometheus.Counter, send func(*parked) bool, drop func(*parked)) *parker {
	p := &parker{free: make(chan *parked, parkSlots), in: make(chan *parked, parkSlots), grant: make(chan struct{}, 1),
		wait: wait, queued: queued, send: send, drop: drop}
	for range parkSlots {
		p.free <- &parked{buf: make([]byte, parkSlotSize)}
	}
	return p
}

// park holds a copy of pkt; false when every slot is taken or it does not fit.
func (p *parker) park(pkt []byte, ss *serverSession) bool {
	if len(pkt) > parkSlotSize-lois.Headroom {
		return false
	}
	select {
	case pk := <-p.free:
		pk.n = copy(pk.buf[lois.Headroom:], pkt)
		pk.deadline = time.Now().Add(p.wait)
		pk.ss = ss
		p.in <- pk
		p.queued.Inc()
		return true
	default:
		return false
	}
}

// granted wakes the loop: a pool was refilled.
func (p *parker) granted() {
	select {
	case p.grant <- struct{}{}:
	default:
	}
}

// loop sends held packets when a grant fills their pool and drops those whose wait ended,
// until stop closes.
func (p *parker) loop(stop stopper) error {
	var q []*parked
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var tc <-chan time.Time
		if len(q) > 0 {
			timer.Reset(time.Until(q[0].deadline))
			tc = timer.C
		}
		retry := false
		select {
		case <-stop:
			return nil
		case pk := <-p.in:
			// A grant may have come between the refusal and the parking: try at once.
			if p.send(pk) {
				p.release(pk)
			} else {
				q = append(q, pk)
			}
		case <-p.grant:
			retry = true
		case <-tc:
		}
		kept := q[:0]
		now := time.Now()
		for _, pk := range q {
			expired := !now.Before(pk.deadline)
			switch {
			case (retry || expired) && p.send(pk): // an expired packet gets a last try
			case expired:
				p.drop(pk)
			default:
				kept = append(kept, pk)
				continue
			}
			p.release(pk)
		}
		clear(q[len(kept):])
		q = kept
	}
}

func (p *parker) release(pk *parked) {
	pk.ss = nil
	p.free <- pk
}
