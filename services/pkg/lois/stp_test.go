package lois_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/lois"
)

// TestSTPWindowsAndRate is spec T20: random windows start with frequency q (±3σ), their
// offsets are uniform in [0, T] (Kolmogorov–Smirnov), and inside a window every whole second
// carries at least R bytes (real + cover).
func TestSTPWindowsAndRate(t *testing.T) {
	const periods = 20000
	T := time.Second
	var offsets []float64
	cfg := lois.STPConfig{Period: T, Q: 0.1, Rate: 2000, Tick: 50 * time.Millisecond,
		OnRandomWindow: func(_, o int64) { offsets = append(offsets, float64(o)/float64(T)) }}
	s, err := lois.NewShaper(cfg, [32]byte{1}, 0)
	must(t, err)
	tick := int64(cfg.Tick)
	perSecond := map[int64]int{}
	activeTicks := map[int64]bool{}
	for now := int64(0); now < periods*int64(T); now += tick {
		pad := s.Tick(now)
		perSecond[now/int64(time.Second)] += pad
		activeTicks[now] = pad > 0
	}
	n := float64(periods)
	mean, sigma := n*cfg.Q, math.Sqrt(n*cfg.Q*(1-cfg.Q))
	if got := float64(len(offsets)); math.Abs(got-mean) > 3*sigma {
		t.Fatalf("%v random windows in %v periods, want %v ± %v", got, n, mean, 3*sigma)
	}
	slices.Sort(offsets)
	d := 0.0
	for i, x := range offsets {
		d = max(d, math.Abs(float64(i+1)/float64(len(offsets))-x), math.Abs(x-float64(i)/float64(len(offsets))))
	}
	if crit := 1.95 / math.Sqrt(float64(len(offsets))); d > crit { // α = 0.001
		t.Fatalf("offsets not uniform: KS D = %.4f > %.4f", d, crit)
	}
	// Every second fully inside a window gets ≥ R bytes: pick seconds whose ticks were all active.
	full := 0
	for sec, bytes := range perSecond {
		all := true
		for k := int64(0); k < int64(time.Second)/tick; k++ {
			all = all && activeTicks[sec*int64(time.Second)+k*tick]
		}
		if all {
			full++
			if bytes < cfg.Rate {
				t.Fatalf("second %d inside a window carried %d B < R = %d", sec, bytes, cfg.Rate)
			}
		}
	}
	if full == 0 {
		t.Fatal("no fully shaped second observed")
	}
}

// TestSTPRealTrafficShaped: real traffic opens a window of length T, real bytes count against
// the cover (no cover when real traffic already exceeds R·Δ), and the window closes after T.
func TestSTPRealTrafficShaped(t *testing.T) {
	s, err := lois.NewShaper(lois.STPConfig{Period: time.Second, Q: 1e-9, Rate: 2000}, [32]byte{2}, 0)
	must(t, err)
	// Period boundaries are evaluated on the first tick; q ≈ 0 so no random window opens.
	if s.Tick(0) != 0 {
		t.Fatal("cover outside any window")
	}
	s.Real(int64(5*time.Millisecond), 5)
	if got := s.Tick(int64(10 * time.Millisecond)); got != 20-5 {
		t.Fatalf("cover %d, want R·Δ − real = 15", got)
	}
	s.Real(int64(15*time.Millisecond), 100)
	if got := s.Tick(int64(20 * time.Millisecond)); got != 0 {
		t.Fatalf("cover %d with real traffic above R", got)
	}
	if got := s.Tick(int64(1100 * time.Millisecond)); got != 0 {
		t.Fatalf("cover %d after the window closed", got)
	}
}

// TestPadsDroppedAndIndistinguishable is spec T20's last two points: pads cross DI → CI → SI
// and SI → DI like any packet, are recovered and dropped (ErrPad) at SI and DI, and on the
// wire no header byte tells them from real packets of the same size.
func TestPadsDroppedAndIndistinguishable(t *testing.T) {
	w := newWorld(t, false, []uint16{5}, 4096, 1)
	r := chacha("pads")
	var realWire, padWire [][]byte
	for i := range 400 {
		buf := make([]byte, lois.Headroom+200)
		var off int
		if i%2 == 0 {
			p, err := lois.BuildPad(buf, lois.Headroom, dip, 61000, cip, 5, 64240, 200, r)
			must(t, err)
			_ = p
			off = lois.Headroom
		} else {
			buf, off = randPacket(r, dip, cip, 5, "none", 0x18, 160)
		}
		noff, err := w.dev.HideUpload(buf, off, now)
		must(t, err)
		wire := bytes.Clone(buf[noff:])
		if i%2 == 0 {
			padWire = append(padWire, wire)
		} else {
			realWire = append(realWire, wire)
		}
		be, err := w.ci.Forward(buf[noff:])
		must(t, err)
		_, _, err = w.si[int(be.IP[3])-1].RecoverUpload(buf, noff)
		if (i%2 == 0) != errors.Is(err, lois.ErrPad) {
			t.Fatalf("packet %d: SI verdict %v", i, err)
		}
	}
	// Bytes constant across all real wire packets must hold the same value in every pad, and
	// every byte that varies among real packets must vary among pads.
	for i := range realWire[0] {
		constReal, constPad := true, true
		for _, p := range realWire {
			constReal = constReal && p[i] == realWire[0][i]
		}
		for _, p := range padWire {
			constPad = constPad && p[i] == padWire[0][i]
		}
		if constReal != constPad || (constReal && realWire[0][i] != padWire[0][i]) {
			t.Errorf("wire byte %d tells pads from real packets (const real %v, pad %v)", i, constReal, constPad)
		}
	}
	// Download pads are dropped at DI.
	buf := make([]byte, lois.Headroom+120)
	_, err := lois.BuildPad(buf, lois.Headroom, [4]byte{10, 0, 0, 1}, portOff+5, dip, 61000, 64240, 120, r)
	must(t, err)
	noff, err := w.si[0].HideDownload(buf, lois.Headroom, w.siPools[0], now)
	must(t, err)
	if _, _, err := w.dev.RecoverDownload(buf, noff); !errors.Is(err, lois.ErrPad) {
		t.Fatalf("DI delivered a download pad: %v", err)
	}
}
