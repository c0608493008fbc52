package sddr

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/sddr/bloom"
)

// beaconFor builds GenBeacon(pk, count, as) with padding from r.
func beaconFor(t testing.TB, pk *[PublicKeySize]byte, count uint8, as []LinkValue, r io.Reader) Beacon {
	t.Helper()
	b := Beacon{PublicKey: *pk, Count: count}
	f := b.filter()
	for i := range as {
		dg := h1(pk, count, &as[i])
		f.Insert(&dg)
	}
	var buf [512]byte
	if _, err := f.Pad(len(as), r, buf[:]); err != nil {
		t.Fatal(err)
	}
	return b
}

func randomPK(r *rand.ChaCha8) (pk [PublicKeySize]byte) {
	r.Read(pk[:])
	return pk
}

func randomSet(t testing.TB, r *rand.ChaCha8, n int) []LinkValue {
	s := make([]LinkValue, n)
	for i := range s {
		s[i] = linkValue(t, r)
	}
	return s
}

// T5 / INV-3: a member survives every beacon of an epoch, whatever |AS|.
func TestNoFalseNegatives(t *testing.T) {
	r := seeded(5)
	sizes := []int{1, 128, 256}
	for trial := range 3000 {
		as := randomSet(t, r, sizes[trial%3])
		pk := randomPK(r)
		for c := range uint8(3) {
			b := beaconFor(t, &pk, c, as, r)
			f := b.filter()
			for i := range as {
				dg := h1(&pk, c, &as[i])
				if !f.Has(&dg) {
					t.Fatalf("trial %d count %d: member %d missing", trial, c, i)
				}
			}
		}
	}
}

// within reports whether k successes in n trials are inside the 99.9 % normal-approximation
// binomial interval around p.
func within(k, n int, p float64) (bool, float64) {
	sd := math.Sqrt(p * (1 - p) / float64(n))
	got := float64(k) / float64(n)
	return math.Abs(got-p) <= 3.29*sd+0.5/float64(n), got
}

// T6 / INV-4: single-beacon FP rate equals (1−(1−1/M)^{KN})^K and survival over n beacons of
// one epoch decays as P_fp^n (fresh salt per beacon).
func TestFalsePositiveRate(t *testing.T) {
	r := seeded(6)
	p := BloomParams.FalsePositiveRate()
	if math.Abs(p-0.04722) > 5e-5 {
		t.Fatalf("analytic P_fp %.5f, spec §3.6 says 0.04722", p)
	}
	const filters, queries = 2000, 100 // 2·10⁵ non-member queries
	surv := [4]int{}
	for range filters {
		as := randomSet(t, r, int(r.Uint64()%(MaxAdvertised+1)))
		pk := randomPK(r)
		bs := []Beacon{beaconFor(t, &pk, 0, as, r), beaconFor(t, &pk, 1, as, r), beaconFor(t, &pk, 2, as, r)}
		for range queries {
			x := linkValue(t, r)
			alive := 0
			for c := range bs {
				dg := h1(&pk, uint8(c), &x)
				if !bs[c].filter().Has(&dg) {
					break
				}
				alive++
			}
			for n := 1; n <= alive; n++ {
				surv[n]++
			}
		}
	}
	for n := 1; n <= 3; n++ {
		ok, got := within(surv[n], filters*queries, math.Pow(p, float64(n)))
		if !ok {
			t.Errorf("survival after %d beacons %.3g, analysis %.3g", n, got, math.Pow(p, float64(n)))
		}
	}
}

// ksStatistic is the two-sample Kolmogorov–Smirnov D.
func ksStatistic(a, b []int) float64 {
	slices.Sort(a)
	slices.Sort(b)
	var i, j int
	d := 0.0
	for i < len(a) && j < len(b) {
		v := min(a[i], b[j])
		for i < len(a) && a[i] == v {
			i++
		}
		for j < len(b) && b[j] == v {
			j++
		}
		d = math.Max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

func popcounts(t *testing.T, r *rand.ChaCha8, n, size int) []int {
	out := make([]int, n)
	for i := range out {
		pk := randomPK(r)
		b := beaconFor(t, &pk, 0, randomSet(t, r, size), r)
		out[i] = b.filter().Popcount()
	}
	return out
}

// T7 / INV-5: the popcount of a padded filter does not reveal |AS| (two-sample KS at α = 0.01),
// and the test has power: unpadded filters of the two sizes are told apart.
func TestLoadHiding(t *testing.T) {
	r := seeded(7)
	const n = 4000
	crit := 1.628 * math.Sqrt(2.0/n) // α = 0.01
	empty, full := popcounts(t, r, n, 0), popcounts(t, r, n, MaxAdvertised)
	if d := ksStatistic(empty, full); d > crit {
		t.Fatalf("KS D = %.4f > %.4f: load leaks |AS|", d, crit)
	}
	mean := 0.0
	for _, v := range full {
		mean += float64(v)
	}
	mean /= n
	if want := BloomParams.ExpectedPopcount(); math.Abs(mean-want) > 1 {
		t.Fatalf("mean popcount %.1f, analysis %.1f", mean, want)
	}
	// Without padding the same statistic separates the sizes: the test can fail.
	unpadded := make([]int, n)
	for i := range unpadded {
		pk := randomPK(r)
		as := randomSet(t, r, 100)
		b := Beacon{PublicKey: pk}
		for j := range as {
			dg := h1(&pk, 0, &as[j])
			b.filter().Insert(&dg)
		}
		unpadded[i] = b.filter().Popcount()
	}
	if d := ksStatistic(unpadded, full); d <= crit {
		t.Fatalf("KS cannot tell unpadded filters (D = %.4f)", d)
	}
}

// T8: padding draws exactly K·(N−|AS|) indices; more than N real elements is an error.
func TestPaddingDraws(t *testing.T) {
	r := seeded(8)
	for _, n := range []int{0, 1, 100, 255, 256} {
		b := Beacon{}
		got, err := b.filter().Pad(n, r, make([]byte, 64))
		if err != nil || got != BloomK*(MaxAdvertised-n) {
			t.Fatalf("|AS| = %d: %d draws, %v", n, got, err)
		}
	}
	if _, err := (&Beacon{}).filter().Pad(MaxAdvertised+1, r, make([]byte, 64)); !errors.Is(err, bloom.ErrOverCapacity) {
		t.Fatalf("|AS| = 257: %v", err)
	}
	d := newDevice(t, 1)
	for i := range MaxAdvertised {
		must(t, d.AddLink(string(rune(i+1000)), linkValue(t, r), Advertise))
	}
	if err := d.AddLink("one-too-many", linkValue(t, r), Advertise); !errors.Is(err, ErrTooManyAdvertised) {
		t.Fatalf("257th advertised link: %v", err)
	}
}

// T9 / INV-6: every frame is 240 bytes with header EF FF, version 1, the engine's count and a
// decodable key, whatever |AS|.
func TestFrameInvariants(t *testing.T) {
	r := seeded(9)
	for _, n := range []int{0, 1, 256} {
		d := newDevice(t, r.Uint64())
		for i := range n {
			must(t, d.AddLink(string(rune(i+1000)), linkValue(t, r), Advertise))
		}
		now := t0
		must(t, d.StartEpoch(now))
		for c := range 5 {
			adv := d.Advert()
			if len(adv.Frame) != FrameSize || adv.Frame[0] != 0xEF || adv.Frame[1] != 0xFF || adv.Frame[2] != 0x10 || int(adv.Frame[3]) != c {
				t.Fatalf("|AS| %d beacon %d: header % x", n, c, adv.Frame[:4])
			}
			b, err := ParseBeacon(adv.Frame[:])
			if err != nil || b.PublicKey != d.ep.pk {
				t.Fatalf("frame does not decode to the engine's key: %v", err)
			}
			if again := b.Marshal(); again != adv.Frame {
				t.Fatal("decode/encode is not the identity")
			}
			now = now.Add(time.Minute)
			must(t, d.NextBeacon(now))
		}
	}
}

// T10: a member's bit positions depend on pk and count; beacons of one epoch differ.
func TestSaltDependence(t *testing.T) {
	r := seeded(10)
	x := linkValue(t, r)
	pk, pk2 := randomPK(r), randomPK(r)
	a, b, c := h1(&pk, 0, &x), h1(&pk, 1, &x), h1(&pk2, 0, &x)
	if a == b || a == c {
		t.Fatal("H1 ignores the salt")
	}
	d := newDevice(t, 3)
	must(t, d.AddLink("x", x, Advertise))
	must(t, d.StartEpoch(t0))
	f0 := d.Advert().Frame
	must(t, d.NextBeacon(t0.Add(time.Minute)))
	if f1 := d.Advert().Frame; bytes.Equal(f0[36:], f1[36:]) {
		t.Fatal("two beacons of one epoch carry the same filter")
	}
}

// INV-8: rotation is atomic. A responder reading the advert concurrently with rotations (the
// controller-only path) never sees an address with two keys or a key with two addresses.
func TestRotationAtomic(t *testing.T) {
	d := newDevice(t, 4)
	must(t, d.StartEpoch(t0))
	var (
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		epochs atomic.Int64 // distinct keys the observer has seen
		mixed  atomic.Value // the first inconsistency the observer saw
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		byAddr, byPK := map[Address][32]byte{}, map[[32]byte]Address{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			a := d.Advert()
			var pk [32]byte
			copy(pk[:], a.Frame[4:36])
			if p, ok := byAddr[a.Addr]; ok && p != pk {
				mixed.CompareAndSwap(nil, "one address served with two keys")
			}
			if ad, ok := byPK[pk]; ok && ad != a.Addr {
				mixed.CompareAndSwap(nil, "one key served under two addresses")
			}
			byAddr[a.Addr], byPK[pk] = pk, a.Addr
			epochs.Store(int64(len(byPK)))
		}
	}()
	// Rotations run while the observer reads; after each one the driver waits (bounded) until
	// the observer has read the new epoch, so every rotation races with reads however the
	// scheduler interleaves the two goroutines.
	now, started := t0, int64(1)
	seen := func() {
		for deadline := time.Now().Add(time.Minute); epochs.Load() < started; {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("the observer saw %d of %d epochs", epochs.Load(), started)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	seen() // the observer has read the first epoch before any rotation (it may start late)
	for i := range 300 {
		now = now.Add(time.Minute)
		if i%3 == 0 {
			must(t, d.StartEpoch(now))
			started++
			seen()
		} else {
			must(t, d.NextBeacon(now))
		}
	}
	close(stop)
	wg.Wait()
	if m := mixed.Load(); m != nil {
		t.Fatal(m)
	}
	if got := epochs.Load(); got != started {
		t.Fatalf("the observer saw %d epochs, %d were started", got, started)
	}
}

// INV-7 / §7 item 15: a new epoch shares no key, address or filter with the last and erases
// the old exponent's DH secrets.
func TestEpochFreshnessAndErasure(t *testing.T) {
	a, b := newDevice(t, 1), newDevice(t, 2)
	s := hear(t, b, a, t0)
	before := a.Advert()
	must(t, a.StartEpoch(t0.Add(time.Minute)))
	after := a.Advert()
	if before.Addr == after.Addr || bytes.Equal(before.Frame[4:36], after.Frame[4:36]) {
		t.Fatal("rotation kept the address or the key")
	}
	r := a.byID[s.ID]
	if r.dhkLive || r.dhk != [32]byte{} {
		t.Fatal("the old epoch's DH secret survived rotation")
	}
	if _, err := a.Prove(s.ID, "x"); !errors.Is(err, ErrEpochOver) {
		t.Fatalf("prove in an ended epoch: %v", err)
	}
}

// §7 item 26: at the count cap the epoch rotates early by default, [R] keeps the last beacon.
func TestCountCap(t *testing.T) {
	for _, keep := range []bool{false, true} {
		d, err := New(Config{Rand: seeded(1), Epoch: 5 * time.Minute, Interval: time.Minute, KeepLastBeacon: keep})
		must(t, err)
		must(t, d.StartEpoch(t0))
		pk := d.ep.pk
		for i := 1; i < 5; i++ {
			must(t, d.NextBeacon(t0.Add(time.Duration(i)*time.Second)))
		}
		if d.ep.count != 4 || d.ep.pk != pk {
			t.Fatalf("keep=%v: count %d", keep, d.ep.count)
		}
		must(t, d.NextBeacon(t0.Add(5*time.Second)))
		if rotated := d.ep.pk != pk; rotated == keep {
			t.Fatalf("keep=%v: rotated=%v at the cap", keep, rotated)
		}
	}
}

// §7 item 23: a listen link added mid-epoch is tested from the next beacon; a removed one
// disappears at once.
func TestListenChangesMidEpoch(t *testing.T) {
	r := seeded(11)
	a, b := newDevice(t, 1), newDevice(t, 2)
	l := linkValue(t, r)
	must(t, b.AddLink("a", l, Advertise))
	must(t, b.StartEpoch(t0))
	hear(t, b, a, t0)
	must(t, a.AddLink("b", l, Listen))
	must(t, b.NextBeacon(t0.Add(time.Minute)))
	if m, ok := matched(hear(t, b, a, t0.Add(time.Minute)), "b"); !ok || m.Hits != 1 {
		t.Fatal("a link added mid-epoch was not tested against the next beacon")
	}
	must(t, a.SetDirection("b", 0))
	must(t, b.NextBeacon(t0.Add(2*time.Minute)))
	if _, ok := matched(hear(t, b, a, t0.Add(2*time.Minute)), "b"); ok {
		t.Fatal("an unlistened link still matches")
	}
}

func TestLinkValueEntropy(t *testing.T) {
	if _, err := ParseLinkValue([]byte("correct horse battery staple!!!!")); !errors.Is(err, ErrWeakLinkValue) {
		t.Fatalf("passphrase accepted: %v", err)
	}
	if _, err := ParseLinkValue(make([]byte, 32)); !errors.Is(err, ErrWeakLinkValue) {
		t.Fatal("zero value accepted")
	}
	v := linkValue(t, seeded(1))
	if _, err := ParseLinkValue(v[:]); err != nil {
		t.Fatalf("random value refused: %v", err)
	}
}
