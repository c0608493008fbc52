package lois

// Pool is a sender's FIFO of unused ⟨id, ks⟩ pairs for one service and direction (spec §3.5:
// DI upload pools, SI download pools). Pairs are consumed in ascending index order and wiped
// when popped; a pool is never refilled by reusing indices (D-20) — only Add of a new epoch
// brings pairs in.
type Pool struct {
	ring []poolEntry
	head int
	n    int
	// LowWater is the level below which NeedsReplenish reports true (spec §3.12).
	LowWater int
	// Expired counts pairs dropped unused because their epoch reached expiry − margin.
	Expired uint64
}

type poolEntry struct {
	p      Pair
	stopAt int64
}

// LowWaterMark is the spec's default low-water mark for a sender that measured pps packets
// per second: max(64, 2 × (pps × 5 s)) (spec §3.12).
func LowWaterMark(pps float64) int { return max(64, int(2*pps*5)) }

// Add appends the stream's pairs of partition replica/replicas, usable until stopAt (unix
// seconds; the stream's expiry minus the sender's safety margin).
func (p *Pool) Add(s *Stream, replicas, replica int, stopAt int64) {
	s.Each(replicas, replica, func(_ uint32, pr Pair) bool {
		p.push(poolEntry{pr, stopAt})
		return true
	})
}

func (p *Pool) push(e poolEntry) {
	if p.n == len(p.ring) {
		grown := make([]poolEntry, max(64, 2*len(p.ring)))
		for i := range p.n {
			grown[i] = p.ring[(p.head+i)%len(p.ring)]
		}
		p.ring, p.head = grown, 0
	}
	p.ring[(p.head+p.n)%len(p.ring)] = e
	p.n++
}

// Pop takes the oldest usable pair at time now (unix seconds). Pairs whose epoch stopped are
// dropped and counted. ok is false when the pool is exhausted: the caller queues or drops the
// packet, never reuses a keystream.
func (p *Pool) Pop(now int64) (pr Pair, ok bool) {
	for p.n > 0 {
		e := &p.ring[p.head]
		p.head++
		if p.head == len(p.ring) {
			p.head = 0
		}
		p.n--
		pr, stop := e.p, e.stopAt
		*e = poolEntry{}
		if now < stop {
			return pr, true
		}
		p.Expired++
	}
	return pr, false
}

// Len is the number of pairs left (including ones that may have expired).
func (p *Pool) Len() int { return p.n }

// NeedsReplenish reports whether the pool fell below its low-water mark: time for
// EPOCH_REQ (DI) or a low-water event (SI).
func (p *Pool) NeedsReplenish() bool { return p.n < p.LowWater }

// Rekey tracks when a seed must be replaced by a new handshake (spec §3.12): every 24 h or
// after 2³² keystreams from one seed, whichever comes first.
type Rekey struct {
	Start int64  // unix seconds of the handshake
	Used  uint64 // keystreams derived from the seed so far
}

const (
	RekeyAfterSeconds = 24 * 3600
	RekeyAfterStreams = 1 << 32
)

// Due reports whether a fresh HELLO is needed.
func (r Rekey) Due(now int64) bool {
	return now-r.Start >= RekeyAfterSeconds || r.Used >= RekeyAfterStreams
}
