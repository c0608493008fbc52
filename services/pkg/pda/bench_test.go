package pda

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Stage benchmarks: keys per second per core for the participant, the proxy (verify,
// EOPRF, re-randomise, tag) and the DB front-end (open), plus the reveal path (shard
// request + oracle + apply) per revealed entry. Each reports thread CPU time (the machine
// is shared; wall time includes descheduling) and the scalar multiplications per key:
// var = variable-base, gen = fixed-base on G, tab = fixed-base on a public key via the
// comb table (ristretto255 only; on P-256 those are variable-base), msm = points in the
// proxy's batched proof check (one variable-time multi-scalar multiplication per batch of
// 256 submissions, plus one gen and one tab per batch).
//
//	go test ./pkg/pda -run '^$' -bench Stage -cpu 1 -benchtime 2s -count 3

func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type stageClock struct {
	cpu time.Duration
}

func startStage() *stageClock {
	runtime.LockOSThread()
	countMuls = &mulCounts{}
	return &stageClock{cpu: threadCPU()}
}

func (c *stageClock) stop(b *testing.B, keys int) {
	d := threadCPU() - c.cpu
	m := *countMuls
	countMuls = nil
	runtime.UnlockOSThread()
	n := float64(keys)
	cpuNs := float64(d.Nanoseconds()) / n
	b.ReportMetric(cpuNs, "cpu-ns/key")
	b.ReportMetric(1e9/cpuNs, "keys/s/core")
	b.ReportMetric(float64(m.variable)/n, "var/key")
	b.ReportMetric(float64(m.fixed)/n, "gen/key")
	b.ReportMetric(float64(m.table)/n, "tab/key")
	b.ReportMetric(float64(m.msm)/n, "msm/key")
}

var benchCases = []struct {
	name string
	o    deployOpts
}{
	{"ristretto255/distinct", deployOpts{group: Ristretto255, tau: 2, seed: 60}},
	{"ristretto255/tuples", deployOpts{group: Ristretto255, mode: CountTuples, tau: 2, seed: 61}},
	{"ristretto255/distinct+D4", deployOpts{group: Ristretto255, tau: 2, values: []uint16{1, 2, 3, 4}, seed: 62}},
	{"ristretto255-circl/distinct", deployOpts{group: Ristretto255, tau: 2, seed: 60, circl: true}},
	{"ristretto255-circl/tuples", deployOpts{group: Ristretto255, mode: CountTuples, tau: 2, seed: 61, circl: true}},
	{"ristretto255-circl/distinct+D4", deployOpts{group: Ristretto255, tau: 2, values: []uint16{1, 2, 3, 4}, seed: 62, circl: true}},
	{"p256/distinct", deployOpts{group: P256, tau: 2, seed: 63}},
}

func benchKeys(b *testing.B, n int) []Observation {
	obs := make([]Observation, n)
	for i := range obs {
		k, _ := IPKeyFromBytes([]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		obs[i] = Observation{Key: k, Value: 1}
	}
	return obs
}

func BenchmarkStageParticipant(b *testing.B) {
	for _, tc := range benchCases {
		b.Run(tc.name, func(b *testing.B) {
			d := newDeployment(b, tc.o)
			p := NewParticipant(d.suite, nil)
			obs := benchKeys(b, 1024)
			var id SessionID
			i := 0
			c := startStage()
			for b.Loop() {
				if _, err := p.Item(id, uint32(i), obs[i%len(obs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			c.stop(b, i)
		})
	}
}

func BenchmarkStageProxy(b *testing.B) {
	for _, tc := range benchCases {
		b.Run(tc.name, func(b *testing.B) {
			d := newDeployment(b, tc.o)
			obs := benchKeys(b, 256)
			sess, id := d.newSession("bench")
			items := make([][]byte, len(obs))
			for i, o := range obs {
				items[i], _ = NewParticipant(d.suite, nil).Item(id, uint32(i), o)
			}
			d.proxy.rand = cryptoRand()
			i := 0
			c := startStage()
			for b.Loop() {
				// One submission batch per iteration (proofs batch-verified), a new session's
				// worth of the same items.
				sess.accepted = map[uint32]bool{}
				out, rej := d.proxy.Ingest(sess, items)
				if len(rej) > 0 || len(out) != len(items) {
					b.Fatal(rej)
				}
				i += len(items)
			}
			c.stop(b, i)
		})
	}
}

func BenchmarkStageDB(b *testing.B) {
	for _, tc := range benchCases {
		b.Run(tc.name, func(b *testing.B) {
			d := newDeployment(b, tc.o)
			for p := range 2 {
				d.submit(pname(p), benchKeys(b, 128))
			}
			items := d.pool
			i := 0
			c := startStage()
			for b.Loop() {
				e, err := d.db.Open(items[i%len(items)], 1)
				if err != nil {
					b.Fatal(err)
				}
				KeyPosition(e.Y)
				i++
			}
			c.stop(b, i)
		})
	}
}

// BenchmarkStageReveal measures the reveal path per revealed entry: the shard's request
// (DB re-randomisation under h_PRX), the oracle's decryption and consistency check, and
// applying the response. Rows have τ = 2 entries.
func BenchmarkStageReveal(b *testing.B) {
	for _, tc := range benchCases {
		b.Run(tc.name, func(b *testing.B) {
			d := newDeployment(b, tc.o)
			for p := range 2 {
				d.submit(pname(p), benchKeys(b, 64))
			}
			d.flush()
			entries := 0
			c := startStage()
			for b.Loop() {
				for _, r := range d.table.rows {
					r.dirty, r.state = true, RowOpen
				}
				for _, q := range must(d.table.RevealRequests()) {
					resp, st, err := d.oracle.Answer(q)
					if err != nil {
						b.Fatal(err)
					}
					entries += st.Entries
					if _, err := d.table.ApplyRevealResponse(resp); err != nil {
						b.Fatal(err)
					}
				}
			}
			c.stop(b, entries)
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkPrimitive re-measures the MEASURED.md denominators in the same run, for both
// ristretto255 backends ("ristre" = edwards25519, the default; "circl-" = circl) and P-256.
func BenchmarkPrimitive(b *testing.B) {
	for _, g := range []*Group{groupRistretto255, groupRistretto255Circl, groupP256} {
		label := g.String()[:6]
		if g == groupRistretto255Circl {
			label = "circl-r255"
		}
		s, _ := g.RandomScalar(cryptoRand())
		p := g.HashToElement([]byte("p"), []byte("PDA-bench"))
		enc := g.encodeElement(p)
		tab := newCombTable(g, p)
		ops := map[string]func(){
			"mul":           func() { g.mul(p, s) },
			"mulgen":        func() { g.mulGen(s) },
			"hash-to-group": func() { g.HashToElement(enc, []byte("PDA-bench")) },
			"decode":        func() { g.DecodeElement(enc) },
			"encode":        func() { g.encodeElement(p) },
			"add":           func() { g.add(p, p) },
		}
		if tab != nil {
			ops["comb"] = func() { tab.mul(s) }
		}
		for name, op := range ops {
			b.Run(label+"/"+name, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c := threadCPU()
				for b.Loop() {
					op()
				}
				b.ReportMetric(float64((threadCPU()-c).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
