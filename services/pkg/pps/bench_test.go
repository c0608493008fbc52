package pps

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cloudflare/circl/group"
	"golang.org/x/crypto/chacha20"
)

// Benchmarks beside the code (STYLE). Compare each with its baseline in the same run:
// label derivation with the raw ChaCha20 keystream it consumes (1 KiB per value), a PSI
// element with one ristretto255 scalar multiplication.

func BenchmarkDeriveLabelsPerValue(b *testing.B) {
	s := testSeed(1)
	b.SetBytes(valueLabelBytes)
	for b.Loop() {
		DeriveLabels(s, 1)
	}
}

func BenchmarkPublishLabelsPerValue(b *testing.B) {
	s := testSeed(1)
	xs := []Fixed{FixedFromFloat(21.5)}
	b.SetBytes(valueLabelBytes)
	for b.Loop() {
		PublishLabels(s, xs)
	}
}

func BenchmarkBaselineChaCha20PerValue(b *testing.B) {
	var buf [valueLabelBytes]byte
	s := testSeed(1)
	b.SetBytes(valueLabelBytes)
	for b.Loop() {
		c, _ := chacha20.NewUnauthenticatedCipher(s[:], drgNonce)
		c.XORKeyStream(buf[:], buf[:])
	}
}

func BenchmarkRatchetStep(b *testing.B) {
	r := NewRatchet(testSeed(2), 0, RatchetOptions{})
	for b.Loop() {
		r.Advance()
	}
}

func BenchmarkRatchetSeed(b *testing.B) {
	r := NewRatchet(testSeed(2), 0, RatchetOptions{})
	for b.Loop() {
		r.Seed()
	}
}

// BenchmarkPSIPerElement runs whole consistency checks (Broker and Garbler, in process) and
// reports the cost per Broker element (one input bit); the Garbler handles two per element.
func BenchmarkPSIPerElement(b *testing.B) {
	for _, values := range []int{8, 64} {
		b.Run(fmt.Sprintf("%d-values", values), func(b *testing.B) {
			w := newPSIWorld(values, rand.New(rand.NewPCG(1, 2)))
			recv := w.honest()
			c := &OPRFChecker{Garbler: &loopback{labels: w.source}}
			for b.Loop() {
				if _, err := c.Check(context.Background(), ExecID{}, recv); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recv)), "ns/element")
		})
	}
}

func BenchmarkBaselineRistrettoScalarMult(b *testing.B) {
	g := group.Ristretto255
	s := g.RandomScalar(crand.Reader)
	e := g.HashToElement([]byte("x"), []byte("dst"))
	out := g.NewElement()
	for b.Loop() {
		out.Mul(e, s)
	}
}
