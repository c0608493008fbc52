package pps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkCheck compares the two ConsistencyCheckers in one run, per input bit (one
// Broker label; the Garbler handles two per bit), both sides in process through the wire
// encodings, at the parking sample's one-day size (108 values = 3,456 bits) and at the
// paper's Table 2 size (2,592 values = 82,944 bits). The KKRT session's base OTs are set up
// before the loop, as the services reuse one session across checks; BenchmarkCheckKKRTSetup
// is their cost. An OPRF check of 82,944 bits takes about a minute, so b.Loop stops after
// one iteration at the default benchtime.
func BenchmarkCheck(b *testing.B) {
	for _, values := range []int{108, 2_592} {
		w := newPSIWorld(values, rand.New(rand.NewPCG(1, 2)))
		recv := w.honest()
		source := cachedSource(w)
		checkers := []struct {
			name string
			c    func(b *testing.B) ConsistencyChecker
		}{
			{"kkrt", func(b *testing.B) ConsistencyChecker {
				c := &KKRTChecker{Garbler: &kkrtLoopback{labels: source}}
				if err := c.Setup(context.Background()); err != nil {
					b.Fatal(err)
				}
				return c
			}},
			{"oprf", func(*testing.B) ConsistencyChecker { return &OPRFChecker{Garbler: &loopback{labels: source}} }},
		}
		for _, k := range checkers {
			b.Run(fmt.Sprintf("%s/bits=%d", k.name, len(recv)), func(b *testing.B) {
				c := k.c(b)
				for b.Loop() {
					bad, err := c.Check(context.Background(), ExecID{}, recv)
					if err != nil || bad != nil {
						b.Fatalf("check: %v, %v", bad, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recv)), "ns/bit")
			})
		}
	}
}

// cachedSource serves every slot's label pairs from memory, so that the benchmark measures
// the checkers and not the test world's label derivation (32 pairs per call).
func cachedSource(w *psiWorld) LabelSource {
	pairs := make([][ValueBits]LabelPair, len(w.seeds))
	for s := range pairs {
		pairs[s] = ValueLabels(&w.seeds[s], 0)
	}
	return func(p Position) (LabelPair, error) { return pairs[p.Slot()][p.Bit()], nil }
}

// BenchmarkCheckKKRTSetup is the once-per-session cost of KKRTChecker: 512 base OTs (four
// Chou–Orlandi sessions of 128), both sides.
func BenchmarkCheckKKRTSetup(b *testing.B) {
	c := &KKRTChecker{Garbler: &kkrtLoopback{}}
	for b.Loop() {
		if err := c.Setup(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
