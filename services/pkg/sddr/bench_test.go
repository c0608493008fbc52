package sddr

import (
	"crypto/ecdh"
	"fmt"
	"testing"

	"github.com/cloudflare/circl/oprf"
)

// benchWorld is a listener with |LS| listen links, one of which each sender advertises among
// 255 others (|AS| = 256, the paper's evaluation), and `senders` pre-built frames of
// distinct senders per count.
type benchWorld struct {
	d      *Device
	frames [][]Frame // [sender][count]
	addrs  []Address
}

func newBenchWorld(b *testing.B, listen, senders, counts int) *benchWorld {
	r := seeded(99)
	w := &benchWorld{d: newDevice(b, 1)}
	friend := linkValue(b, r)
	must(b, w.d.AddLink("friend", friend, Listen))
	for i := 1; i < listen; i++ {
		must(b, w.d.AddLink(fmt.Sprint("l", i), linkValue(b, r), Listen))
	}
	for s := range senders {
		p := newDevice(b, r.Uint64())
		must(b, p.AddLink("friend", friend, Advertise))
		for j := 1; j < MaxAdvertised; j++ {
			must(b, p.AddLink(fmt.Sprint("a", j), linkValue(b, r), Advertise))
		}
		must(b, p.StartEpoch(t0))
		var fs []Frame
		for c := range counts {
			if c > 0 {
				p.ep.count++
				must(b, p.install())
			}
			fs = append(fs, p.Advert().Frame)
		}
		w.frames = append(w.frames, fs)
		w.addrs = append(w.addrs, p.Advert().Addr)
		_ = s
	}
	return w
}

// forget drops all peer state so the next beacon of every sender is a first beacon.
func (w *benchWorld) forget() {
	clear(w.d.peers)
	clear(w.d.byID)
	w.d.newPeers = 0
}

// BenchmarkGenBeacon: building and installing one beacon (Alg. 2) per discovery interval.
func BenchmarkGenBeacon(b *testing.B) {
	for _, as := range []int{0, 256} {
		b.Run(fmt.Sprintf("AS=%d", as), func(b *testing.B) {
			r := seeded(1)
			d := newDevice(b, 2)
			for i := range as {
				must(b, d.AddLink(fmt.Sprint(i), linkValue(b, r), Advertise))
			}
			must(b, d.StartEpoch(t0))
			b.ReportAllocs()
			var cpu *cpuClock
			for b.Loop() {
				if cpu == nil { // after b.Loop starts the timer
					cpu = startCPU()
				}
				d.ep.count = 1
				if err := d.install(); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, 1, "")
		})
	}
}

// BenchmarkBeaconFirst: one beacon of a sender never seen before — X25519, L/sk/id and |LS|
// salted hashes (Alg. 5 steps 5 and 7). This is the per-neighbour cost of a scan.
func BenchmarkBeaconFirst(b *testing.B) {
	for _, ls := range []int{1, 256, 1024, 10000} {
		b.Run(fmt.Sprintf("LS=%d", ls), func(b *testing.B) {
			w := newBenchWorld(b, ls, 64, 1)
			b.ReportAllocs()
			i := 0
			var cpu *cpuClock
			for b.Loop() {
				if cpu == nil { // after b.Loop starts the timer
					cpu = startCPU()
				}
				s := i % len(w.frames)
				if s == 0 {
					w.forget()
				}
				if _, err := w.d.OnBeacon(w.frames[s][0][:], w.addrs[s], t0); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu.report(b, 1, "")
		})
	}
}

// BenchmarkBeaconNext: a later beacon of a known sender (same key, new count) once the
// matching set has converged to the true intersection: only survivors are re-tested.
func BenchmarkBeaconNext(b *testing.B) {
	w := newBenchWorld(b, 256, 1, 254)
	for c := range 8 { // converge
		if _, err := w.d.OnBeacon(w.frames[0][c][:], w.addrs[0], t0); err != nil {
			b.Fatal(err)
		}
	}
	p := w.d.peers[w.d.byID[w.d.peers[[32]byte(w.frames[0][0][4:36])].rec.keys.id].peer.pk]
	b.ReportAllocs()
	c := 8
	var cpu *cpuClock
	for b.Loop() {
		if cpu == nil { // after b.Loop starts the timer
			cpu = startCPU()
		}
		if c == 254 {
			c = 8
			p.processed = [4]uint64{}
		}
		if _, err := w.d.OnBeacon(w.frames[0][c][:], w.addrs[0], t0); err != nil {
			b.Fatal(err)
		}
		c++
	}
	cpu.report(b, 1, "")
}

// BenchmarkRecognizeEncounter: the whole recognition of one sender at |LS| = 256 to the
// Recognized threshold (3 beacons: one first, two pruning), the quantity the paper compares
// with PSI (Fig. 2).
func BenchmarkRecognizeEncounter(b *testing.B) {
	w := newBenchWorld(b, 256, 64, 3)
	b.ReportAllocs()
	i := 0
	var cpu *cpuClock
	for b.Loop() {
		if cpu == nil { // after b.Loop starts the timer
			cpu = startCPU()
		}
		s := i % len(w.frames)
		if s == 0 {
			w.forget()
		}
		var sg Sighting
		var err error
		for c := range 3 {
			if sg, err = w.d.OnBeacon(w.frames[s][c][:], w.addrs[s], t0); err != nil {
				b.Fatal(err)
			}
		}
		if m, ok := matched(sg, "friend"); !ok || !m.Recognized {
			b.Fatal("friend not recognised")
		}
		i++
	}
	cpu.report(b, 1, "")
}

// BenchmarkInquiry: one inquiry's worth of new neighbours against a listen set, up to the
// spec's gateway case of 10k link values × 255 devices (§9). ns/op is per inquiry.
func BenchmarkInquiry(b *testing.B) {
	for _, ls := range []int{256, 10000} {
		for _, n := range []int{5, 255} {
			b.Run(fmt.Sprintf("LS=%d/devices=%d", ls, n), func(b *testing.B) {
				w := newBenchWorld(b, ls, n, 1)
				var cpu *cpuClock
				for b.Loop() {
					if cpu == nil { // after b.Loop starts the timer
						cpu = startCPU()
					}
					w.forget()
					for s := range w.frames {
						if _, err := w.d.OnBeacon(w.frames[s][0][:], w.addrs[s], t0); err != nil {
							b.Fatal(err)
						}
					}
				}
				cpu.report(b, n, "neighbour")
			})
		}
	}
}

// BenchmarkDHPSI is the paper's strawman measured in the same run: an X25519 key exchange
// plus an OPRF-based private set intersection (circl's RFC 9497 OPRF over ristretto255, the
// fastest suite it offers) between a listener's 256 listen ids and a sender's 256 advertise
// ids. The sender's OPRF key is fresh per encounter, as unlinkability needs; both sides'
// work is counted.
func BenchmarkDHPSI(b *testing.B) {
	const n = 256
	r := seeded(7)
	ls, as := make([][]byte, n), make([][]byte, n)
	for i := range n {
		l := linkValue(b, r)
		ls[i] = l[:]
		if i == 0 {
			as[i] = ls[0] // one common element
		} else {
			a := linkValue(b, r)
			as[i] = a[:]
		}
	}
	suite := oprf.SuiteRistretto255
	b.ReportAllocs()
	var cpu *cpuClock
	for b.Loop() {
		if cpu == nil { // after b.Loop starts the timer
			cpu = startCPU()
		}
		// DH, both sides.
		ka, _ := ecdh.X25519().GenerateKey(r)
		kb, _ := ecdh.X25519().GenerateKey(r)
		if _, err := ka.ECDH(kb.PublicKey()); err != nil {
			b.Fatal(err)
		}
		// PSI: the listener blinds its set, the sender evaluates it under a fresh key and
		// sends the PRF of its own set; the listener intersects.
		key, err := oprf.GenerateKey(suite, r)
		if err != nil {
			b.Fatal(err)
		}
		server, client := oprf.NewServer(suite, key), oprf.NewClient(suite)
		fin, req, err := client.Blind(ls)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := server.Evaluate(req)
		if err != nil {
			b.Fatal(err)
		}
		outs, err := client.Finalize(fin, ev)
		if err != nil {
			b.Fatal(err)
		}
		theirs := make(map[string]struct{}, n)
		for _, x := range as {
			y, err := server.FullEvaluate(x)
			if err != nil {
				b.Fatal(err)
			}
			theirs[string(y)] = struct{}{}
		}
		common := 0
		for _, y := range outs {
			if _, ok := theirs[string(y)]; ok {
				common++
			}
		}
		if common != 1 {
			b.Fatalf("PSI found %d common elements", common)
		}
	}
	cpu.report(b, 1, "")
}
