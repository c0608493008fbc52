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
	// rate measurement (Measure): pairs popped at the start of the window and its start.
	measPopped uint64
	measAt     int64
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
	if p.LowWater == 0 {
		p.LowWater = LowWaterMark(0)
	}
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

// Measure updates the low-water mark from the packets per second measured since the last
// window (at least one second long) began: max(min, 2 × pps × 5 s), min ≥ 64 by default
// (spec §3.12). It is called from a role's maintenance tick, never per packet.
func (p *Pool) Measure(now int64, min int) {
	if p.measAt == 0 {
		p.measAt, p.measPopped = now, p.popped
		return
	}
	if now-p.measAt < 1 {
		return
	}
	pps := float64(p.popped-p.measPopped) / float64(now-p.measAt)
	p.measAt, p.measPopped = now, p.popped
	p.LowWater = max(min, LowWaterMark(pps))
}

// Popped is the number of pairs taken (or dropped at expiry) so far.
func (p *Pool) Popped() uint64 { return p.popped }

// Added is the number of pairs added so far (every epoch).
func (p *Pool) Added() uint64 { return p.added }

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
	return r.DueWith(now, RekeyLimits{})
}

// RekeyLimits bound one seed's life; zero fields take the spec's defaults (24 h, 2³²
// keystreams). Tests configure small limits.
type RekeyLimits struct {
	Seconds int64
	Streams uint64
}

// DueWith reports whether a fresh HELLO is needed under limits l.
func (r Rekey) DueWith(now int64, l RekeyLimits) bool {
	if l.Seconds <= 0 {
		l.Seconds = RekeyAfterSeconds
	}
	if l.Streams == 0 {
		l.Streams = RekeyAfterStreams
	}
	return now-r.Start >= l.Seconds || r.Used >= l.Streams
}

// Allows reports whether n more keystreams may be derived from the seed at now without
// passing the limits (a grant that would cross them is refused: the device must re-handshake).
func (r Rekey) Allows(now int64, n uint64, l RekeyLimits) bool {
	next := r
	next.Used += n
	if l.Streams == 0 {
		l.Streams = RekeyAfterStreams
	}
	return !r.DueWith(now, l) && next.Used <= l.Streams
}
