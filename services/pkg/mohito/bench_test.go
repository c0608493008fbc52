package mohito

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks report ratios against a baseline measured in the same run
// (DESIGN.md). Results and the command line are in docs/benchmarks-mohito.md.

func benchParams(vendors int) Params {
	return Params{Vendors: vendors, Q: 1, CommandSize: 1024, ResponseSize: 1024, Suite: SuiteX25519}
}

// bareOpenNs measures one bare crypto/hpke Open of a 1 KiB plaintext
// (X25519 / HKDF-SHA256 / ChaCha20-Poly1305), the denominator of the ratios.
func bareOpenNs(b *testing.B, n int) float64 {
	b.Helper()
	k, _ := hpke.DHKEM(ecdhX25519()).GenerateKey()
	msg := make([]byte, 1024)
	cts := make([][]byte, n)
	for i := range cts {
		cts[i], _ = hpke.Seal(k.PublicKey(), hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, msg)
	}
	start := time.Now()
	for _, ct := range cts {
		if _, err := hpke.Open(k, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, ct); err != nil {
			b.Fatal(err)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// BenchmarkHPKEOpen1KiB is the bare baseline on its own.
func BenchmarkHPKEOpen1KiB(b *testing.B) {
	k, _ := hpke.DHKEM(ecdhX25519()).GenerateKey()
	ct, _ := hpke.Seal(k.PublicKey(), hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, make([]byte, 1024))
	for b.Loop() {
		if _, err := hpke.Open(k, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, ct); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIntegratorPerMessage is the integrator's per-message cost: open
// the inner HPKE layer of a 1 KiB command plus its share of encoding the
// vendor's OKVS (one vendor table of `batch` entries per iteration). It
// reports ns/msg for the integrator and for a bare 1 KiB HPKE Open measured
// in the same iteration, and their ratio bare/integrator (goal ≥ 0.8).
func BenchmarkIntegratorPerMessage(b *testing.B) {
	const batch = 1024
	p := benchParams(1)
	ik, _ := GenerateKey(p.Suite)
	in, _ := NewIntegrator(p, ik)
	entries := make([][]byte, batch)
	for i := range entries {
		entries[i], _ = MakeFake(p, ik.PublicKey(), 0, rand.Reader)
	}
	// Bare opens and integrator opens are interleaved in chunks so both see
	// the same machine load (the machine is shared).
	bk, _ := hpke.DHKEM(ecdhX25519()).GenerateKey()
	bareCT, _ := hpke.Seal(bk.PublicKey(), hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, make([]byte, 1024))
	var integ, bare float64
	for b.Loop() {
		cmds := make([]ShuffledCommand, batch)
		var tb, ti time.Duration
		for c := 0; c < batch; c += 16 {
			s0 := time.Now()
			for range 16 {
				if _, err := hpke.Open(bk, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), nil, bareCT); err != nil {
					b.Fatal(err)
				}
			}
			s1 := time.Now()
			for i := c; i < c+16; i++ {
				if err := in.OpenInner(uint32(i), entries[i], &cmds[i]); err != nil {
					b.Fatal(err)
				}
			}
			tb, ti = tb+s1.Sub(s0), ti+time.Since(s1)
		}
		s2 := time.Now()
		if _, _, _, err := EncodeCommandTable(p, cmds, batch, nil); err != nil {
			b.Fatal(err)
		}
		ti += time.Since(s2)
		bare += float64(tb.Nanoseconds()) / batch
		integ += float64(ti.Nanoseconds()) / batch
	}
	b.ReportMetric(integ/float64(b.N), "integrator-ns/msg")
	b.ReportMetric(bare/float64(b.N), "bare-open-ns/msg")
	b.ReportMetric(bare/integ, "ratio-bare/integrator")
}

// BenchmarkShufflerPerMessage is V*'s per-message command-phase cost: open the
// outer layer, the G2 check, B, fakes from the pool (50 % of N), π and
// output; ratio as above.
func BenchmarkShufflerPerMessage(b *testing.B) {
	const k = 512
	f := newRoundFixture(b, 2*k, 10)
	var shuf, bare float64
	for b.Loop() {
		b0 := bareOpenNs(b, 64)
		start := time.Now()
		f.shufflePhase(b, 1)
		shuf += float64(time.Since(start).Nanoseconds()) / k
		bare += (b0 + bareOpenNs(b, 64)) / 2 // bracket the phase: the machine is shared
		b.StopTimer()
		f.refillPool(b)
		f.resetIntegrator(b)
		b.StartTimer()
	}
	b.ReportMetric(shuf/float64(b.N), "shuffler-ns/msg")
	b.ReportMetric(bare/float64(b.N), "bare-open-ns/msg")
	b.ReportMetric(bare/shuf, "ratio-bare/shuffler")
}

// roundFixture pre-computes everything clients and devices do, so a round
// benchmark measures only the services: k real 1 KiB commands, N = 2k
// entries after fakes, |𝒱| vendors, one active device per real command plus
// as many idle ones.
type roundFixture struct {
	p        Params
	n, k     int
	ik       *PrivateKey
	vk       *PrivateKey
	ri       *RoundInfo
	in       *Integrator
	sh       *Shuffler
	vendors  []*Vendor
	targets  []uint64
	m1       [][]byte
	pool     [][][]byte
	ir       *IntegratorRound
	sr       *ShuffleRound
	summary  []byte
	m7       [][][]byte // per vendor, per device: a random response (device work)
	devCount int
}

func newRoundFixture(b *testing.B, n, vendors int) *roundFixture {
	b.Helper()
	p := benchParams(vendors)
	f := &roundFixture{p: p, n: n, k: n / 2}
	f.ik, _ = GenerateKey(p.Suite)
	f.vk, _ = GenerateKey(p.Suite)
	f.ri = &RoundInfo{T: 1, Shuffler: 0, Params: p, IntegratorKey: f.ik.PublicKey(), ShufflerKey: f.vk.PublicKey()}
	f.in, _ = NewIntegrator(p, f.ik)
	f.sh, _ = NewShuffler(0, p, f.vk, NewFakePool(p, f.ik.PublicKey()))
	per := n / vendors
	f.targets = make([]uint64, vendors)
	f.devCount = per // active devices per vendor
	prf := make([][][KeySize]byte, vendors)
	creds := make([][]DeviceCredentials, vendors)
	for v := range vendors {
		f.targets[v] = uint64(per)
		prf[v] = make([][KeySize]byte, f.devCount)
		creds[v] = make([]DeviceCredentials, f.devCount)
		for d := range f.devCount {
			s, _ := NewDeviceSecret(rand.Reader)
			creds[v][d] = DeviceCredentials{Vendor: uint32(v), Keys: s.Keys()}
			prf[v][d] = creds[v][d].Keys.PRF
		}
		vend, _ := NewVendor(uint32(v), p, prf[v])
		f.vendors = append(f.vendors, vend)
	}
	f.m1 = make([][]byte, f.k)
	payload := make([]byte, p.MaxCommandPayload())
	now := time.Now()
	benchParallel(f.k, func(i int) {
		v := i % vendors
		d := (i / vendors) % f.devCount
		f.m1[i], _, _ = IssueCommand(f.ri, &creds[v][d], 1, payload, now, rand.Reader)
	})
	f.pool = make([][][]byte, vendors)
	for v := range vendors {
		f.pool[v] = make([][]byte, per/2+1)
		benchParallel(len(f.pool[v]), func(i int) {
			f.pool[v][i], _ = MakeFake(p, f.ik.PublicKey(), uint32(v), rand.Reader)
		})
	}
	f.refillPool(b)
	f.m7 = make([][][]byte, vendors)
	for v := range vendors {
		f.m7[v] = make([][]byte, f.devCount)
		for d := range f.devCount {
			m := make([]byte, p.DeviceResponseSize())
			rand.Read(m)
			putHeader(m, KindDeviceResponse, 1)
			z := DeriveEphemeralID(&prf[v][d], 1, 1)
			copy(m[headerSize:], z[:])
			f.m7[v][d] = m
		}
	}
	f.resetIntegrator(b)
	return f
}

func (f *roundFixture) refillPool(b *testing.B) {
	f.sh.pool.mu.Lock()
	for v := range f.pool {
		f.sh.pool.fakes[v] = append([][]byte(nil), f.pool[v]...)
	}
	f.sh.pool.mu.Unlock()
}

func (f *roundFixture) resetIntegrator(b *testing.B) {
	f.ir, _ = f.in.NewRound(f.ri, f.targets)
	f.sr, _ = f.sh.NewRound(f.ri, nil)
}

// shufflePhase runs admission, V*'s opening, the G2 check and the shuffle.
func (f *roundFixture) shufflePhase(b *testing.B, workers int) {
	m2 := make([][]byte, f.k)
	for i, m1 := range f.m1 {
		var err error
		if _, m2[i], err = f.ir.Admit(fmt.Sprint(i), m1); err != nil {
			b.Fatal(err)
		}
	}
	benchParallelN(workers, f.k, func(i int) {
		idx, l, err := f.sh.OpenForward(1, m2[i])
		if err != nil {
			panic(err)
		}
		f.sr.Accept(idx, l)
	})
	m3, _ := f.ir.Close()
	must(f.sr.Close(m3))
	ch, err := f.sr.Challenge()
	must(err)
	rep, err := f.ir.Reply(ch)
	must(err)
	ver, err := f.sr.Verdict(rep)
	must(err)
	fin, err := f.ir.Finish(ver)
	must(err)
	f.summary, err = f.sr.Finish(fin)
	must(err)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// fullRound runs every service stage of one round with `workers` workers per
// stage: shuffle phase, integrator decrypt (by position) and OKVS encoding
// (by vendor), vendor decoding, vendor response encoding, integrator response
// decoding and V*'s unshuffle.
func (f *roundFixture) fullRound(b *testing.B, workers int) {
	f.shufflePhase(b, workers)
	p := f.p
	sum, counts, err := f.ir.AcceptSummary(f.summary)
	must(err)
	const batch = 256
	nb := (sum.N + batch - 1) / batch
	parts := make([][]ShuffledCommand, nb)
	benchParallelN(workers, nb, func(i int) {
		m4, err := f.sr.Output(i*batch, min(batch, sum.N-i*batch))
		must(err)
		parts[i], _, err = f.in.OpenShuffled(1, m4, sum.N, nil)
		must(err)
	})
	var cmds []ShuffledCommand
	for _, pt := range parts {
		cmds = append(cmds, pt...)
	}
	byVendor, _ := GroupByVendor(cmds, p.Vendors)
	slots := make([][]ResponseSlot, p.Vendors)
	m5 := make([][]byte, p.Vendors)
	benchParallelN(workers, p.Vendors, func(v int) {
		capacity := CommandCapacity(counts[v], counts[v])
		t, sl, _, err := EncodeCommandTable(p, byVendor[v], capacity, nil)
		must(err)
		slots[v] = sl
		m5[v], err = MarshalTable(KindCommandTable, 1, uint32(v), capacity, t)
		must(err)
	})
	m8 := make([][]byte, p.Vendors)
	benchParallelN(workers, p.Vendors, func(v int) {
		t, _, err := ParseCommandTable(p, 1, uint32(v), counts[v], m5[v])
		must(err)
		active := make([]int, f.devCount)
		for i := range active {
			active[i] = i
		}
		vr, err := f.vendors[v].NewRound(f.ri, active)
		must(err)
		if _, err := vr.DecodeCommands(t); err != nil {
			panic(err)
		}
		for d := range active {
			must(vr.AcceptResponse(d, f.m7[v][d]))
		}
		rt, rc, err := vr.EncodeResponses(1024, nil)
		must(err)
		m8[v], err = MarshalTable(KindResponseTable, 1, uint32(v), rc, rt)
		must(err)
	})
	resp := make([][]byte, sum.N)
	benchParallelN(workers, p.Vendors, func(v int) {
		rt, _, err := ParseResponseTable(p, 1, uint32(v), 1024, 1<<22, m8[v])
		must(err)
		out := make([][]byte, len(slots[v]))
		must(DecodeResponseLayer(p, rt, slots[v], out))
		for i, s := range slots[v] {
			resp[s.Pos] = out[i]
		}
	})
	for s := 0; s < sum.N; s += batch {
		m9, err := MarshalResponseLayer(p, 1, s, resp[s:min(s+batch, sum.N)])
		must(err)
		must(f.sr.AcceptResponses(m9))
	}
	if _, err := f.sr.ResponsesOut(batch); err != nil {
		panic(err)
	}
}

var (
	fixtureMu sync.Mutex
	fixtures  = map[int]*roundFixture{}
)

func cachedRoundFixture(b *testing.B, n int) *roundFixture {
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if f, ok := fixtures[n]; ok {
		return f
	}
	f := newRoundFixture(b, n, 10)
	fixtures[n] = f
	return f
}

// BenchmarkFullRound runs a whole round (services only) at N = 10k (and 100k
// with -bench 'FullRound/N=100000') entries of 1 KiB, half of them fakes.
// Run with -cpu 1,2: workers = GOMAXPROCS, so the two lines give the speed-up.
func BenchmarkFullRound(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			if n > 10_000 && testing.Short() {
				b.Skip("100k round skipped in -short")
			}
			b.StopTimer()
			f := cachedRoundFixture(b, n)
			workers := runtime.GOMAXPROCS(0)
			var total, cpu time.Duration
			for i := 0; i < b.N; i++ {
				f.refillPool(b)
				f.resetIntegrator(b)
				runtime.GC()
				c0 := cpuTime()
				start := time.Now()
				b.StartTimer()
				f.fullRound(b, workers)
				b.StopTimer()
				total += time.Since(start)
				cpu += cpuTime() - c0
			}
			// cpu-s/round is the process CPU time: on a shared machine the
			// wall-clock speed-up of -cpu 2 is bounded by the CPU we get,
			// and cpu/wall shows how much that was.
			b.ReportMetric(total.Seconds()/float64(b.N), "s/round")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/round")
			b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "entries/s")
		})
	}
}

func benchParallel(n int, f func(i int)) { benchParallelN(runtime.GOMAXPROCS(0), n, f) }

func benchParallelN(workers, n int, f func(i int)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

func ecdhX25519() ecdh.Curve { return ecdh.X25519() }

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
