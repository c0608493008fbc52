package sddr

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// seeded is a deterministic randomness source for reproducible tests (§7 item 17).
func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

func newDevice(t testing.TB, seed uint64) *Device {
	t.Helper()
	d, err := New(Config{Rand: seeded(seed)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartEpoch(t0); err != nil {
		t.Fatal(err)
	}
	return d
}

func linkValue(t testing.TB, r *rand.ChaCha8) LinkValue {
	t.Helper()
	v, err := NewLinkValue(r)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hear delivers a's installed advert to b.
func hear(t testing.TB, from, to *Device, now time.Time) Sighting {
	t.Helper()
	a := from.Advert()
	s, err := to.OnBeacon(a.Frame[:], a.Addr, now)
	if err != nil {
		t.Fatalf("OnBeacon: %v", err)
	}
	return s
}

func matched(s Sighting, label string) (Match, bool) {
	for _, m := range s.Matches {
		if m.Label == label {
			return m, true
		}
	}
	return Match{}, false
}
