package roles

import (
	crand "crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// padder is one sender's stochastic traffic padding (spec §4, §7.5): a shaper, and the
// last real flow, whose addresses, ports and window the cover packets copy (everything
// else in them is random, and once hidden they look like any other LOIS packet). mu guards
// the shaper and the sender's pools: the packet loop holds it around its hide, the pad loop
// around building and hiding cover packets.
type padder struct {
	mu   sync.Mutex
	sh   *lois.Shaper
	rnd  *mrand.ChaCha8
	flow padFlow
	have bool
}

type padFlow struct {
	src, dst     [4]byte
	sport, dport uint16
	window       uint16
}

func newPadder(cfg lois.STPConfig) (*padder, error) {
	var seed [32]byte
	crand.Read(seed[:])
	sh, err := lois.NewShaper(cfg, seed, time.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	crand.Read(seed[:])
	return &padder{sh: sh, rnd: mrand.NewChaCha8(seed)}, nil
}

// real records a real packet (plaintext, before hiding; the caller holds mu).
func (p *padder) real(pkt []byte, now int64) {
	if len(pkt) < 40 {
		return
	}
	p.flow = padFlow{src: [4]byte(pkt[12:16]), dst: [4]byte(pkt[16:20]), sport: binary.BigEndian.Uint16(pkt[20:]),
		dport: binary.BigEndian.Uint16(pkt[22:]), window: binary.BigEndian.Uint16(pkt[34:])}
	p.have = true
	p.sh.Real(now, len(pkt))
}

// tick builds and hides this tick's cover packets: hide hides buf[lois.Headroom:] of the
// given length and sends it, returning false to stop.
func (p *padder) tick(now time.Time, buf []byte, hide func(n int) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := p.sh.Tick(now.UnixNano())
	if !p.have {
		return 0 // no flow to copy yet: a pad must not carry fields no real packet has
	}
	sent := 0
	for sent < want {
		size := p.sh.PadSize()
		if _, err := lois.BuildPad(buf, lois.Headroom, p.flow.src, p.flow.sport, p.flow.dst, p.flow.dport, p.flow.window, size, p.rnd); err != nil {
			break
		}
		if !hide(size) {
			break
		}
		sent += size
	}
	return sent
}

// stopper is an io.Closer that ends the pad loop.
type stopper chan struct{}

func (s stopper) Close() error {
	select {
	case <-s:
	default:
		close(s)
	}
	return nil
}
