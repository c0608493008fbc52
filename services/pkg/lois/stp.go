package lois

import (
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// STPConfig holds the per-community padding constants (spec §4, D-26). The defaults are the
// spec's placeholders: T = 60 s, q = 0.1, R = 16 kbit/s, Δ = 10 ms.
type STPConfig struct {
	Period time.Duration // T: long enough for a whole request/reply exchange
	Q      float64       // probability that a period gets a random shaping window
	Rate   int           // R in bytes per second, the same for every device of a community
	Tick   time.Duration // Δ of the token bucket
	// Sizes is the empirical distribution of cover packet sizes (IP total length, ≥ 40):
	// each pad draws one uniformly. Default: sizes typical of IoT traffic (< 250 B, §2).
	Sizes []int
	// OnRandomWindow, if set, is told of every random window (period start and offset, ns);
	// tests use it, roles may count it.
	OnRandomWindow func(periodStart, offset int64)
}

func (c *STPConfig) fill() error {
	if c.Period == 0 {
		c.Period = 60 * time.Second
	}
	if c.Q == 0 {
		c.Q = 0.1
	}
	if c.Rate == 0 {
		c.Rate = 16000 / 8
	}
	if c.Tick == 0 {
		c.Tick = 10 * time.Millisecond
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{66, 90, 120, 160, 200, 240}
	}
	if c.Q < 0 || c.Q > 1 || c.Rate < 0 || c.Tick <= 0 || c.Period < c.Tick {
		return fmt.Errorf("lois stp: invalid config q=%v rate=%d tick=%v period=%v", c.Q, c.Rate, c.Tick, c.Period)
	}
	for _, s := range c.Sizes {
		if s < fixedHdr || s > 1500 {
			return fmt.Errorf("lois stp: cover size %d outside [40, 1500]", s)
		}
	}
	return nil
}

// Shaper is stochastic traffic padding [7] as spec §4/§7.5 fixes it: time is cut into
// periods of length T; each period opens, with probability q, a shaping window of length T
// at a uniform offset in [0, T]; real traffic opens or extends a window [now, now+T) so that
// real exchanges are shaped the same way. In a window every tick of Δ carries at least R·Δ
// bytes: the shortfall of real bytes is made up by cover packets. Real packets are never held
// back (the shaper only counts them), so real traffic above R is not hidden.
type Shaper struct {
	cfg        STPConfig
	rnd        *mrand.ChaCha8
	nextPeriod int64
	windows    [][2]int64 // at most a few live windows: [start, end)
	real       int
	credit     int
}

// NewShaper starts a shaper at time start (unix ns) with the randomness of seed.
func NewShaper(cfg STPConfig, seed [32]byte, start int64) (*Shaper, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Shaper{cfg: cfg, rnd: mrand.NewChaCha8(seed), nextPeriod: start}, nil
}

// Real records a real packet of n bytes sent at now and opens or extends the activity window.
func (s *Shaper) Real(now int64, n int) {
	s.real += n
	s.addWindow(now, now+int64(s.cfg.Period))
}

func (s *Shaper) addWindow(a, b int64) {
	for i := range s.windows {
		w := &s.windows[i]
		if a <= w[1] && b >= w[0] {
			w[0], w[1] = min(w[0], a), max(w[1], b)
			return
		}
	}
	s.windows = append(s.windows, [2]int64{a, b})
}

func (s *Shaper) active(now int64) bool {
	live := s.windows[:0]
	in := false
	for _, w := range s.windows {
		if w[1] > now {
			live = append(live, w)
			in = in || w[0] <= now
		}
	}
	s.windows = live
	return in
}

// Tick is called every Δ at now and returns how many cover bytes to send in this tick.
func (s *Shaper) Tick(now int64) int {
	T := int64(s.cfg.Period)
	for s.nextPeriod <= now {
		if float64(s.rnd.Uint64()>>11)/(1<<53) < s.cfg.Q {
			o := int64(s.rnd.Uint64() % uint64(T+1))
			s.addWindow(s.nextPeriod+o, s.nextPeriod+o+T)
			if s.cfg.OnRandomWindow != nil {
				s.cfg.OnRandomWindow(s.nextPeriod, o)
			}
		}
		s.nextPeriod += T
	}
	realBytes := s.real
	s.real = 0
	if !s.active(now) {
		s.credit = 0
		return 0
	}
	// R·Δ in whole bytes, carrying the remainder so that rates below 100 B/s still add up.
	s.credit += s.cfg.Rate * int(s.cfg.Tick/time.Millisecond)
	want := s.credit / 1000
	s.credit %= 1000
	return max(0, want-realBytes)
}

// PadSize draws the size of the next cover packet.
func (s *Shaper) PadSize() int { return s.cfg.Sizes[s.rnd.Uint64()%uint64(len(s.cfg.Sizes))] }

// BuildPad writes a cover packet of size bytes at buf[off:] for the flow src:sport →
// dst:dport (DI: the device's pad flow to CIP:SID; SI: the reverse) and returns it. Its
// flags carry PadMarker, seq, ack and the payload are random, so once hidden it looks like
// any other LOIS packet (spec §4 "cover packets must be real LOIS packets"). window is the
// receive window the real flows currently advertise (the role takes it from the last real
// packet): it travels in clear, and a pad with a window of its own would stand out.
func BuildPad(buf []byte, off int, src [4]byte, sport uint16, dst [4]byte, dport uint16, window uint16, size int, rnd *mrand.ChaCha8) ([]byte, error) {
	if size < fixedHdr || off+size > len(buf) {
		return nil, fmt.Errorf("lois pad: size %d does not fit", size)
	}
	p := buf[off : off+size]
	rnd.Read(p[fixedHdr:])
	var h [16]byte
	rnd.Read(h[:])
	clear(p[:fixedHdr])
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[ipTotLen:], uint16(size))
	copy(p[ipID:], h[0:2])
	p[ipFlags] = 0x40
	p[ipTTL] = NormalTTL
	p[ipProto] = protoTCP
	copy(p[ipSrc:], src[:])
	copy(p[ipDst:], dst[:])
	binary.BigEndian.PutUint16(p[tcpSport:], sport)
	binary.BigEndian.PutUint16(p[tcpDport:], dport)
	copy(p[tcpSeq:], h[2:10])
	p[tcpDoff] = 5 << 4
	p[tcpFlags] = PadMarker | 0x10 | h[10]&0xE8
	binary.BigEndian.PutUint16(p[tcpFlags+1:], window)
	FixChecksums(p)
	return p, nil
}
