package sddr

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"testing"
	"time"
)

// hamming is the number of differing filter bits between two frames.
func hamming(a, b *Frame) int {
	n := 0
	for i := headerSize + PublicKeySize; i < FrameSize; i++ {
		n += bits.OnesCount8(a[i] ^ b[i])
	}
	return n
}

func popcount(f *Frame) int {
	n := 0
	for _, c := range f[headerSize+PublicKeySize:] {
		n += bits.OnesCount8(c)
	}
	return n
}

// linkers are the passive adversary's strategies of S2 (no timing): given one beacon of epoch k
// and the candidate beacons of epoch k+1, pick the candidate most likely of the same device.
var linkers = map[string]func(prev *Advert, cands []*Advert) int{
	"address": func(prev *Advert, cands []*Advert) int {
		for i, c := range cands {
			if c.Addr == prev.Addr {
				return i
			}
		}
		return 0
	},
	"hamming": func(prev *Advert, cands []*Advert) int {
		best, bi := math.MaxInt, 0
		for i, c := range cands {
			if h := hamming(&prev.Frame, &c.Frame); h < best {
				best, bi = h, i
			}
		}
		return bi
	},
	"popcount": func(prev *Advert, cands []*Advert) int {
		best, bi := math.MaxInt, 0
		p := popcount(&prev.Frame)
		for i, c := range cands {
			if d := abs(popcount(&c.Frame) - p); d < best {
				best, bi = d, i
			}
		}
		return bi
	},
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// linkAcrossEpochs runs D devices with equal-size, different advertised sets for E epochs and
// returns each linker's accuracy at matching the last beacon of epoch k to the first of k+1.
func linkAcrossEpochs(t *testing.T, devices, epochs int, rotate func(d *Device, now time.Time) error) map[string]float64 {
	r := seeded(21)
	ds := make([]*Device, devices)
	for i := range ds {
		ds[i] = newDevice(t, r.Uint64())
		for j := range 64 {
			must(t, ds[i].AddLink(fmt.Sprint(j), linkValue(t, r), Advertise))
		}
	}
	now := t0
	for _, d := range ds {
		must(t, rotate(d, now))
	}
	hits, trials := map[string]int{}, 0
	for range epochs {
		last := make([]*Advert, devices)
		for i, d := range ds {
			last[i] = d.Advert()
		}
		now = now.Add(DefaultEpoch)
		next := make([]*Advert, devices)
		for i, d := range ds {
			must(t, rotate(d, now))
			next[i] = d.Advert()
		}
		for i := range ds {
			trials++
			for name, l := range linkers {
				if l(last[i], next) == i {
					hits[name]++
				}
			}
		}
	}
	acc := map[string]float64{}
	for name := range linkers {
		acc[name] = float64(hits[name]) / float64(trials)
	}
	return acc
}

// S2 / INV-7 / INV-13: strangers cannot link a device across epochs. No linker beats chance
// (1/D) by more than 4 standard deviations over 20 devices × 40 epochs; the same linkers do
// link a device whose rotation is broken (address and key kept, filter unsalted by key),
// which shows the test can fail.
func TestStrangersCannotLinkAcrossEpochs(t *testing.T) {
	const D, E = 20, 40
	chance := 1.0 / D
	bound := chance + 4*math.Sqrt(chance*(1-chance)/(D*E))
	for name, acc := range linkAcrossEpochs(t, D, E, (*Device).StartEpoch) {
		if acc > bound {
			t.Errorf("linker %s links epochs with accuracy %.3f > %.3f", name, acc, bound)
		}
	}
	broken := func(d *Device, now time.Time) error {
		if !d.ep.started || d.ep.rotation < 2 {
			return d.StartEpoch(now) // first epoch only; later "rotations" keep key and address
		}
		d.ep.count = 0
		return d.install()
	}
	acc := linkAcrossEpochs(t, D, E, broken)
	if acc["address"] < 0.99 {
		t.Fatalf("the address linker missed a device that never rotates (%.2f)", acc["address"])
	}
}

// S3 (Def. 1): the anonymity game. The adversary sees, for two users with equal-size advertised
// sets, one exposed beacon of each from an earlier epoch, then the challenge beacon of one of
// them in the current epoch, and guesses whose it is by filter distance. Its advantage over
// 4000 games stays within 4 standard deviations of 0.
func TestAnonymityGame(t *testing.T) {
	r := seeded(31)
	const games = 4000
	wins := 0
	for g := range games {
		users := [2]*Device{newDevice(t, r.Uint64()), newDevice(t, r.Uint64())}
		var exposed [2]*Advert
		for i, u := range users {
			for j := range 32 {
				must(t, u.AddLink(fmt.Sprint(j), linkValue(t, r), Advertise))
			}
			must(t, u.StartEpoch(t0))
			exposed[i] = u.Advert()
			must(t, u.StartEpoch(t0.Add(DefaultEpoch)))
		}
		b := int(r.Uint64() & 1)
		ch := users[b].Advert()
		guess := 0
		if hamming(&ch.Frame, &exposed[1].Frame) < hamming(&ch.Frame, &exposed[0].Frame) {
			guess = 1
		}
		if g%2 == 1 { // alternate the tie-break so a constant guess cannot win
			if hamming(&ch.Frame, &exposed[1].Frame) <= hamming(&ch.Frame, &exposed[0].Frame) {
				guess = 1
			}
		}
		if guess == b {
			wins++
		}
	}
	adv := math.Abs(float64(wins)/games - 0.5)
	if adv > 4*0.5/math.Sqrt(games) {
		t.Fatalf("anonymity advantage %.4f", adv)
	}
}

// S4: silent revocation without re-keying others. A links with B, C and D and revokes B; from
// A's next epoch B recognises A only at the false-positive rate, C and D keep recognising A
// with untouched state, and A sends nothing to anyone (the engine has no send path).
func TestRevocationIsSilentAndLocal(t *testing.T) {
	r := seeded(41)
	a := newDevice(t, 1)
	friends := map[string]*Device{"b": newDevice(t, 2), "c": newDevice(t, 3), "d": newDevice(t, 4)}
	values := map[string]LinkValue{}
	for name, f := range friends {
		values[name] = linkValue(t, r)
		must(t, a.AddLink(name, values[name], Advertise))
		must(t, f.AddLink("a", values[name], Listen))
	}
	recognises := func(f *Device, now time.Time) bool {
		var s Sighting
		for i := range 3 {
			if i > 0 {
				must(t, a.NextBeacon(now.Add(time.Duration(i)*time.Minute)))
			}
			s = hear(t, a, f, now.Add(time.Duration(i)*time.Minute))
		}
		m, ok := matched(s, "a")
		return ok && m.Recognized
	}
	now := t0.Add(time.Second)
	must(t, a.StartEpoch(now))
	for name, f := range friends {
		if !recognises(f, now) {
			t.Fatalf("%s does not recognise A before revocation", name)
		}
	}
	cBefore := friends["c"].links["a"]
	must(t, a.Revoke("b"))
	bHits := 0
	const epochs = 200
	for e := range epochs {
		now = now.Add(DefaultEpoch + time.Minute)
		must(t, a.StartEpoch(now))
		for name, f := range friends {
			must(t, f.NextBeacon(now))
			s := hear(t, a, f, now)
			_, ok := matched(s, "a")
			if name == "b" && ok {
				bHits++
			}
			if name != "b" && !ok {
				t.Fatalf("epoch %d: %s lost A after B's revocation", e, name)
			}
		}
	}
	p := BloomParams.FalsePositiveRate()
	if ok, got := within(bHits, epochs, p); !ok {
		t.Fatalf("revoked B still matches A's first beacon at rate %.3f, want P_fp %.3f", got, p)
	}
	if friends["c"].links["a"] != cBefore || a.links["c"] != values["c"] {
		t.Fatal("revoking B changed another friend's link value")
	}
}

// S4 with RevokeNow: the rotation is immediate (new key and address), so B never sees a
// match that stops within one of A's epochs.
func TestRevokeNowRotates(t *testing.T) {
	r := seeded(42)
	a, b := newDevice(t, 1), newDevice(t, 2)
	l := linkValue(t, r)
	must(t, a.AddLink("b", l, Advertise))
	must(t, b.AddLink("a", l, Listen))
	must(t, a.StartEpoch(t0))
	if _, ok := matched(hear(t, a, b, t0), "a"); !ok {
		t.Fatal("B does not match A")
	}
	before := a.Advert()
	must(t, a.RevokeNow("b", t0.Add(time.Second)))
	after := a.Advert()
	if before.Addr == after.Addr || bytes.Equal(before.Frame[4:36], after.Frame[4:36]) {
		t.Fatal("RevokeNow did not rotate key and address")
	}
	s := hear(t, a, b, t0.Add(time.Second))
	if !s.NewPeer {
		t.Fatal("after RevokeNow B still sees the old peer")
	}
}

// §3.9: key confirmation at epoch boundaries. When A rotates between hearing B and B hearing
// A, the two hold different keys: A's Confirm names an encounter B does not have and linking
// is refused; the next mutual discovery yields a shared key that confirms both ways.
func TestKeyConfirmationAtEpochBoundary(t *testing.T) {
	a, b := newDevice(t, 1), newDevice(t, 2)
	sa := hear(t, b, a, t0)                    // A, epoch 1, hears B
	must(t, a.StartEpoch(t0.Add(time.Second))) // A rotates
	sb := hear(t, a, b, t0.Add(time.Second))   // B hears A's new key
	if sa.ID == sb.ID {
		t.Fatal("keys agree across a rotation")
	}
	ca, err := a.ConfirmMessage(sa.ID)
	must(t, err)
	if _, err := b.OnConfirm(ca.Marshal()); !errors.Is(err, ErrUnknownEncounter) {
		t.Fatalf("mismatched confirm: %v", err)
	}
	if err := a.LinkEncounter(sa.ID, "b", Listen); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("linking an unconfirmed key: %v", err)
	}
	// Next discovery: A hears B's next beacon with its new key.
	must(t, b.NextBeacon(t0.Add(time.Minute)))
	sa2 := hear(t, b, a, t0.Add(time.Minute))
	if sa2.ID != sb.ID {
		t.Fatal("the next discovery did not converge on one key")
	}
	ca2, _ := a.ConfirmMessage(sa2.ID)
	cb2, _ := b.ConfirmMessage(sb.ID)
	if _, err := b.OnConfirm(ca2.Marshal()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OnConfirm(cb2.Marshal()); err != nil {
		t.Fatal(err)
	}
	// Reflection and forgery fail.
	if _, err := a.OnConfirm(ca2.Marshal()); !errors.Is(err, ErrReflected) {
		t.Fatalf("reflected confirm: %v", err)
	}
	bad := cb2
	bad.Tag[0] ^= 1
	if _, err := a.OnConfirm(bad.Marshal()); !errors.Is(err, ErrBadTag) {
		t.Fatalf("forged confirm: %v", err)
	}
	ia, _ := a.Encounter(sa2.ID)
	ib, _ := b.Encounter(sb.ID)
	if !ia.Confirmed || !ib.Confirmed || ia.Key != ib.Key {
		t.Fatal("confirmed encounter keys differ")
	}
	sasA, _ := a.SAS(sa2.ID)
	sasB, _ := b.SAS(sb.ID)
	if sasA != sasB || len(sasA) != 6 {
		t.Fatalf("SAS %q vs %q", sasA, sasB)
	}
	// Alg. 6: both link the confirmed L; B now recognises A.
	must(t, a.LinkEncounter(sa2.ID, "b", Advertise))
	must(t, b.LinkEncounter(sb.ID, "a", Listen))
	must(t, a.StartEpoch(t0.Add(2*time.Minute)))
	if _, ok := matched(hear(t, a, b, t0.Add(2*time.Minute)), "a"); !ok {
		t.Fatal("a link made from a confirmed encounter does not match")
	}
}

// T14: the verification message proves the right link only, in this encounter only, in this
// direction only.
func TestVerify(t *testing.T) {
	r := seeded(51)
	a, b, c := newDevice(t, 1), newDevice(t, 2), newDevice(t, 3)
	l, wrong := linkValue(t, r), linkValue(t, r)
	must(t, a.AddLink("b", l, Advertise))
	must(t, a.AddLink("decoy", wrong, Advertise))
	must(t, b.AddLink("a", l, Listen))
	must(t, c.AddLink("a", l, Listen))
	must(t, a.StartEpoch(t0))
	sb, sa := hear(t, a, b, t0), hear(t, b, a, t0)
	sc := hear(t, a, c, t0)
	hear(t, c, a, t0)
	msg, err := a.Prove(sa.ID, "b")
	must(t, err)
	if label, err := b.OnVerify(msg.Marshal()); err != nil || label != "a" {
		t.Fatalf("correct L: %q %v", label, err)
	}
	dec, _ := a.Prove(sa.ID, "decoy")
	if _, err := b.OnVerify(dec.Marshal()); !errors.Is(err, ErrBadTag) {
		t.Fatalf("wrong L verified: %v", err)
	}
	// Replay into another encounter (C's dhk with A differs).
	replay := msg
	replay.ID = sc.ID
	if _, err := c.OnVerify(replay.Marshal()); !errors.Is(err, ErrBadTag) {
		t.Fatalf("replayed tag verified: %v", err)
	}
	// Reflection: B's own proof for the same link sent back to B.
	must(t, b.AddLink("a-adv", l, 0))
	refl, _ := b.Prove(sb.ID, "a-adv")
	if _, err := b.OnVerify(refl.Marshal()); !errors.Is(err, ErrBadTag) {
		t.Fatalf("reflected tag verified: %v", err)
	}
}

// T13 / INV-10: no L, dhk, exponent or link value appears in frames, messages or the sightings
// handed to apps.
func TestSecretHygiene(t *testing.T) {
	r := seeded(61)
	a, b := newDevice(t, 1), newDevice(t, 2)
	l := linkValue(t, r)
	must(t, a.AddLink("b", l, Advertise|Listen))
	must(t, b.AddLink("a", l, Advertise|Listen))
	must(t, a.StartEpoch(t0))
	must(t, b.StartEpoch(t0))
	var out bytes.Buffer
	var secrets [][]byte
	for i := range 4 {
		now := t0.Add(time.Duration(i) * time.Minute)
		sa, sb := hear(t, b, a, now), hear(t, a, b, now)
		fmt.Fprintf(&out, "%+v %+v", sa, sb)
		for _, d := range []*Device{a, b} {
			adv := d.Advert()
			out.Write(adv.Frame[:])
			out.Write((&Response{Addr: adv.Addr, Frame: adv.Frame}).Marshal())
			secrets = append(secrets, d.ep.priv.Bytes())
		}
		rec := a.byID[sa.ID]
		secrets = append(secrets, rec.keys.link[:], rec.dhk[:])
		ca, _ := a.ConfirmMessage(sa.ID)
		out.Write(ca.Marshal())
		v, _ := a.Prove(sa.ID, "b")
		out.Write(v.Marshal())
		must(t, a.NextBeacon(now.Add(time.Minute)))
		must(t, b.NextBeacon(now.Add(time.Minute)))
	}
	secrets = append(secrets, l[:])
	for _, s := range secrets {
		for w := 0; w+8 <= len(s); w += 8 {
			if bytes.Contains(out.Bytes(), s[w:w+8]) {
				t.Fatalf("a secret's bytes %x appear in emitted data", s[w:w+8])
			}
		}
	}
}
