package sddr

import (
	"bytes"
	"crypto/ecdh"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// T1 / INV-1: both sides derive the same L, sk and encounter id — 10⁴ random key pairs through
// the derivation, 200 of them through two whole engines exchanging beacons.
func TestKeyAgreement(t *testing.T) {
	r := seeded(1)
	pairs := 10000 // spec T1
	if testing.Short() {
		pairs = 1000
	}
	for i := range pairs {
		var sa, sb [32]byte
		r.Read(sa[:])
		r.Read(sb[:])
		a, err := ecdh.X25519().NewPrivateKey(sa[:])
		must(t, err)
		b, err := ecdh.X25519().NewPrivateKey(sb[:])
		must(t, err)
		pa, pb := [32]byte(a.PublicKey().Bytes()), [32]byte(b.PublicKey().Bytes())
		da, err := a.ECDH(b.PublicKey())
		must(t, err)
		db, err := b.ECDH(a.PublicKey())
		must(t, err)
		if deriveKeys(&pa, &pb, da) != deriveKeys(&pb, &pa, db) {
			t.Fatalf("pair %d: keys differ", i)
		}
	}
	for i := range 200 {
		a, b := newDevice(t, r.Uint64()), newDevice(t, r.Uint64())
		sa, sb := hear(t, b, a, t0), hear(t, a, b, t0)
		if sa.ID != sb.ID {
			t.Fatalf("engine pair %d: encounter ids differ", i)
		}
		ra, rb := a.byID[sa.ID], b.byID[sb.ID]
		if ra.keys != rb.keys || ra.dhk != rb.dhk {
			t.Fatalf("engine pair %d: keys differ", i)
		}
		if ra.role == rb.role {
			t.Fatalf("engine pair %d: both sides took role %d", i, ra.role)
		}
	}
}

// T1: keys that share a long prefix still order consistently (the ordering rule compares whole
// encodings).
func TestKeyAgreementEqualPrefix(t *testing.T) {
	var lo, hi [PublicKeySize]byte
	for i := range lo {
		lo[i], hi[i] = 0x42, 0x42
	}
	hi[31] = 0x43
	dhk := bytes.Repeat([]byte{7}, 32)
	if deriveKeys(&lo, &hi, dhk) != deriveKeys(&hi, &lo, dhk) {
		t.Fatal("L depends on which side computes it")
	}
	hi2 := hi
	hi2[31] = 0x44
	if deriveKeys(&lo, &hi, dhk).link == deriveKeys(&lo, &hi2, dhk).link {
		t.Fatal("L does not depend on the last byte of a key")
	}
}

// T2 / INV-2: L, sk and the id are distinct; another epoch key or another peer changes all.
func TestKeySeparation(t *testing.T) {
	a, b, c := newDevice(t, 1), newDevice(t, 2), newDevice(t, 3)
	ab := a.byID[hear(t, b, a, t0).ID].keys
	ac := a.byID[hear(t, c, a, t0).ID].keys
	if bytes.Equal(ab.link[:], ab.sk[:]) || bytes.Contains(ab.link[:], ab.id[:]) || bytes.Contains(ab.sk[:], ab.id[:]) {
		t.Fatal("L, sk and the encounter id are not separated")
	}
	if ab.link == ac.link || ab.sk == ac.sk || ab.id == ac.id {
		t.Fatal("two peers in one epoch share a key")
	}
	if err := b.StartEpoch(t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ab2 := a.byID[hear(t, b, a, t0.Add(time.Minute)).ID].keys
	if ab2.link == ab.link || ab2.sk == ab.sk || ab2.id == ab.id {
		t.Fatal("a new epoch key left a key unchanged")
	}
}

// T3 / T4 / INV-9: mutual friends recognise each other after RecognitionHits beacons; a
// one-way link gives one-way recognition.
func TestFriendsRecogniseEachOther(t *testing.T) {
	r := seeded(9)
	a, b := newDevice(t, 10), newDevice(t, 11)
	ab, oneway := linkValue(t, r), linkValue(t, r)
	must(t, a.AddLink("bob", ab, Advertise|Listen))
	must(t, b.AddLink("alice", ab, Advertise|Listen))
	must(t, a.AddLink("bob-watch", oneway, Listen)) // A listens for B…
	must(t, b.AddLink("to-alice", oneway, 0))       // …but B does not advertise it
	now := t0.Add(time.Second)
	must(t, a.StartEpoch(now))
	must(t, b.StartEpoch(now))
	if a.RecognitionHits() != 3 {
		t.Fatalf("recognition needs %d beacons, want 3 for |LS| ≤ 256", a.RecognitionHits())
	}
	for i := 1; i <= 3; i++ {
		sa, sb := hear(t, b, a, now), hear(t, a, b, now)
		ma, okA := matched(sa, "bob")
		mb, okB := matched(sb, "alice")
		if !okA || !okB {
			t.Fatalf("beacon %d: a friend's link is missing (a %v, b %v)", i, okA, okB)
		}
		if ma.Hits != i || mb.Hits != i || ma.Recognized != (i >= 3) || mb.Recognized != (i >= 3) {
			t.Fatalf("beacon %d: hits %d/%d recognized %v/%v", i, ma.Hits, mb.Hits, ma.Recognized, mb.Recognized)
		}
		if m, ok := matched(sa, "bob-watch"); ok && m.Recognized {
			t.Fatal("A recognised a link B does not advertise")
		}
		now = now.Add(time.Minute)
		must(t, a.NextBeacon(now))
		must(t, b.NextBeacon(now))
	}
}

// T12: own beacons are ignored and a repeated (pk, count) changes nothing.
func TestOwnAndDuplicateBeacons(t *testing.T) {
	r := seeded(3)
	a, b := newDevice(t, 1), newDevice(t, 2)
	l := linkValue(t, r)
	must(t, a.AddLink("b", l, Listen))
	must(t, b.AddLink("a", l, Advertise))
	must(t, b.StartEpoch(t0))
	own := a.Advert()
	if _, err := a.OnBeacon(own.Frame[:], own.Addr, t0); !errors.Is(err, ErrOwnBeacon) {
		t.Fatalf("own beacon: %v", err)
	}
	hear(t, b, a, t0)
	adv := b.Advert()
	if _, err := a.OnBeacon(adv.Frame[:], adv.Addr, t0); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if m := a.peers[b.ep.pk].matching[0]; m.hits != 1 {
		t.Fatalf("duplicate changed hits to %d", m.hits)
	}
}

// §7 item 20: at most 255 new peers per inquiry.
func TestInquiryBound(t *testing.T) {
	a := newDevice(t, 1)
	r := seeded(5)
	for i := range MaxNewPerInquiry + 1 {
		p := newDevice(t, r.Uint64())
		adv := p.Advert()
		_, err := a.OnBeacon(adv.Frame[:], adv.Addr, t0)
		if i < MaxNewPerInquiry && err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		if i == MaxNewPerInquiry && !errors.Is(err, ErrInquiryFull) {
			t.Fatalf("peer 256: %v, want ErrInquiryFull", err)
		}
	}
	must(t, a.NextBeacon(t0.Add(time.Minute)))
	p := newDevice(t, 999)
	if _, err := a.OnBeacon(p.Advert().Frame[:], p.Advert().Addr, t0.Add(time.Minute)); err != nil {
		t.Fatalf("next inquiry still refused: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// T3: with |LS| = 256 against senders advertising 256 links, false entries average ≈ 12 after
// one beacon (256·P_fp) and ≤ 0.03 after three (256·P_fp³ = 0.027).
func TestFalseEntriesAfterThreeBeacons(t *testing.T) {
	r := seeded(71)
	const senders = 300
	ls := randomSet(t, r, 256)
	var after1, after3 int
	for range senders {
		pk := randomPK(r)
		as := randomSet(t, r, 256)
		alive := make([]bool, len(ls))
		for c := range uint8(3) {
			b := beaconFor(t, &pk, c, as, r)
			for i := range ls {
				if c > 0 && !alive[i] {
					continue
				}
				dg := h1(&pk, c, &ls[i])
				alive[i] = b.filter().Has(&dg)
				if c == 0 && alive[i] {
					after1++
				}
			}
		}
		for _, a := range alive {
			if a {
				after3++
			}
		}
	}
	p := BloomParams.FalsePositiveRate()
	if ok, got := within(after1, senders*256, p); !ok {
		t.Errorf("false entries after 1 beacon: %.2f per sender, analysis %.2f", got*256, 256*p)
	}
	mean3 := float64(after3) / senders
	if bound := 256*p*p*p + 3.29*math.Sqrt(256*p*p*p/senders); mean3 > bound {
		t.Errorf("false entries after 3 beacons: %.3f per sender > %.3f", mean3, bound)
	}
}

// INV-8 from the receiver's side: one key under two addresses is flagged.
func TestAddressAnomaly(t *testing.T) {
	a, b := newDevice(t, 1), newDevice(t, 2)
	hear(t, b, a, t0)
	must(t, b.NextBeacon(t0.Add(time.Minute)))
	adv := b.Advert()
	other := adv.Addr
	other[5] ^= 1
	s, err := a.OnBeacon(adv.Frame[:], other, t0.Add(time.Minute))
	must(t, err)
	if !s.AddrChanged {
		t.Fatal("a key seen under a second address was not flagged")
	}
}

// §7 item 12: Recognized needs the least n with P_fp^n ≤ min(1e-3, 0.05/|LS|).
func TestRecognitionThreshold(t *testing.T) {
	r := seeded(81)
	d := newDevice(t, 1)
	for _, tc := range []struct{ ls, hits int }{{1, 3}, {256, 3}, {474, 3}, {475, 4}, {1000, 4}, {10000, 4}, {10100, 5}} {
		for len(d.listenBy) < tc.ls {
			must(t, d.AddLink(fmt.Sprint(len(d.listenBy)), linkValue(t, r), Listen))
		}
		if got := d.RecognitionHits(); got != tc.hits {
			t.Errorf("|LS| = %d: %d beacons, want %d", tc.ls, got, tc.hits)
		}
	}
}
