package lois

// Pool is a sender's FIFO of unused ⟨id, ks⟩ pairs for one service and direction (spec §3.5:
// DI upload pools, SI download pools). Pairs are consumed in ascending index order and wiped
// when popped; a pool is never refilled by reusing indices (D-20) — only Add of a new epoch
// brings pairs in.
type Pool struct {
	ring []Pair
	head int
	n    int
	// epochs holds, per added batch, the sequence number after its last pair and its stop
	// time: one entry per epoch instead of one per pair keeps a pair at 24 bytes (spec §5
	// memory model).
	epochs []poolEpoch
	popped uint64 // pairs taken or dropped so far
	added  uint64
	// LowWater is the level below which NeedsReplenish reports true (spec §3.12).
	LowWater int
	// Expired counts pairs dropped unused because their epoch reached expiry − margin.
	Expired uint64
}

type poolEpoch struct {
	end    uint64
	stopAt int64
}

// LowWaterMark is the spec's default low-water mark for a sender that measured pps packets
// per second: max(64, 2 × (pps × 5 s)) (spec §3.12).
func LowWaterMark(pps float64) int { return max(64, int(2*pps*5)) }

// Add appends the stream's pairs of partition replica/replicas, usable until stopAt (unix
// seconds; the stream's expiry minus the sender's safety margin).
func (p *Pool) Add(s *Stream, replicas, replica int, stopAt int64) {
	p.reserve(int(s.N)/max(1, replicas) + 1)
	s.Each(replicas, replica, func(_ uint32, pr Pair) bool {
		p.push(pr)
		return true
	})
	p.epochs = append(p.epochs, poolEpoch{p.added, stopAt})
}

// reserve grows the ring to hold extra more pairs, exactly: a DI's memory is mostly pools.
func (p *Pool) reserve(extra int) {
	if p.n+extra <= len(p.ring) {
		return
	}
	grown := make([]Pair, p.n+extra)
	for i := range p.n {
		grown[i] = p.ring[(p.head+i)%len(p.ring)]
	}
	p.ring, p.head = grown, 0
}

func (p *Pool) push(e Pair) {
	if p.n == len(p.ring) {
		p.reserve(max(64, p.n))
	}
	p.ring[(p.head+p.n)%len(p.ring)] = e
	p.n++
	p.added++
}

// Pop takes the oldest usable pair at time now (unix seconds). Pairs whose epoch stopped are
// dropped and counted. ok is false when the pool is exhausted: the caller queues or drops the
// packet, never reuses a keystream.
func (p *Pool) Pop(now int64) (pr Pair, ok bool) {
	for p.n > 0 {
		for len(p.epochs) > 1 && p.epochs[0].end <= p.popped {
			p.epochs = p.epochs[1:]
		}
		e := &p.ring[p.head]
		p.head++
		if p.head == len(p.ring) {
			p.head = 0
		}
		p.n--
		p.popped++
		pr = *e
		*e = Pair{} // a used keystream does not linger in memory
		if now < p.epochs[0].stopAt {
			return pr, true
		}
		p.Expired++
	}
	return Pair{}, false
}

// Bytes is the pool's memory: 24 bytes per slot of its ring plus its epoch list.
func (p *Pool) Bytes() int { return len(p.ring)*SegmentSize + cap(p.epochs)*16 }

// Len is the number of pairs left (including ones that may have expired).
func (p *Pool) Len() int { return p.n }

// NeedsReplenish reports whether the pool fell below its low-water mark: time for
// EPOCH_REQ (DI) or a low-water event (SI).
func (p *Pool) NeedsReplenish() bool { return p.n < p.LowWater }

// bySID is a 16-bit-keyed table with two array indexings and pages made on demand: on the
// per-packet path a Go map lookup cost a fifth of the DI transform.
type bySID[T any] struct{ pages [256]*[256]T }

func (t *bySID[T]) get(k uint16) (v T) {
	if p := t.pages[k>>8]; p != nil {
		v = p[k&0xFF]
	}
	return v
}

func (t *bySID[T]) set(k uint16, v T) {
	if t.pages[k>>8] == nil {
		t.pages[k>>8] = new([256]T)
	}
	t.pages[k>>8][k&0xFF] = v
}

// Pools holds a sender's pools by service id (a DI's upload pools for one cloud, or an SI's
// download pools for one session).
type Pools struct{ t bySID[*Pool] }

// Get returns the pool of sid, or nil.
func (ps *Pools) Get(sid uint16) *Pool { return ps.t.get(sid) }

// Set installs the pool of sid.
func (ps *Pools) Set(sid uint16, p *Pool) { ps.t.set(sid, p) }

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
