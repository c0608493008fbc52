package ot

import (
	"crypto/aes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks beside the code (STYLE), each with its baseline in the same run: one
// fixed-key AES-128 block and one SHA-256 of 32 bytes per op, the cost of the cheapest
// correlation-robust hash per OT. The extension's sender does about two AES blocks per
// OT for the hash and one for the column PRG, plus the transposition.

func reportOTs(b *testing.B, n int) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(n)
	b.ReportMetric(ns, "ns/OT")
	b.ReportMetric(1e9/ns, "OT/s")
}

// BenchmarkCorrelatedOT runs whole correlated-OT batches, both sides in one goroutine
// (request, sender, reply, receiver): the per-core cost of an OT to the pair.
func BenchmarkCorrelatedOT(b *testing.B) {
	for _, n := range []int{128, 10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s, r := pair(b, nil)
			c := randomChoices(rand.New(rand.NewPCG(1, 1)), n)
			delta := Block{1}
			for b.Loop() {
				req, rb, err := r.Extend(c, n)
				if err != nil {
					b.Fatal(err)
				}
				sb, err := s.Extend(req)
				if err != nil {
					b.Fatal(err)
				}
				_, reply, _ := sb.Correlated(delta)
				if _, err := rb.Correlated(reply); err != nil {
					b.Fatal(err)
				}
			}
			reportOTs(b, n)
		})
	}
}

// BenchmarkCorrelatedOTSender is the Garbler's share: Extend on a request and the
// correlated reply (the same request replayed at its offset).
func BenchmarkCorrelatedOTSender(b *testing.B) {
	const n = 10_000
	s, r := pair(b, nil)
	req, _, _ := r.Extend(randomChoices(rand.New(rand.NewPCG(1, 1)), n), n)
	for b.Loop() {
		s.next = req.Offset
		sb, err := s.Extend(req)
		if err != nil {
			b.Fatal(err)
		}
		sb.Correlated(Block{1})
	}
	reportOTs(b, n)
}

// BenchmarkCorrelatedOTReceiver is the Broker's share: the request and the reply.
func BenchmarkCorrelatedOTReceiver(b *testing.B) {
	const n = 10_000
	s, r := pair(b, nil)
	c := randomChoices(rand.New(rand.NewPCG(1, 1)), n)
	req, _, _ := r.Extend(c, n)
	sb, _ := s.Extend(req)
	_, reply, _ := sb.Correlated(Block{1})
	for b.Loop() {
		r.next = req.Offset
		_, rb, err := r.Extend(c, n)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rb.Correlated(reply); err != nil {
			b.Fatal(err)
		}
	}
	reportOTs(b, n)
}

// BenchmarkBaseOTSetup is the one-time Chou–Orlandi setup of a session (128 base OTs, both
// sides).
func BenchmarkBaseOTSetup(b *testing.B) {
	for b.Loop() {
		pair(b, nil)
	}
}

func BenchmarkBaselineFixedKeyAESBlock(b *testing.B) {
	c, _ := aes.NewCipher(make([]byte, 16))
	var x Block
	for b.Loop() {
		c.Encrypt(x[:], x[:])
	}
}

func BenchmarkBaselineSHA256Block(b *testing.B) {
	var x [32]byte
	for b.Loop() {
		x = sha256.Sum256(x[:])
	}
}
