package gc

import (
	"crypto/rand"
	"testing"
)

// BenchmarkFixedKeyAES is π on batches of 1024 independent blocks, per kernel set.
func BenchmarkFixedKeyAES(b *testing.B) {
	var key Label
	rand.Read(key[:])
	k := newFixedKey(key)
	src := make([]Label, 1024)
	dst := make([]Label, 1024)
	rand.Read(labelBytes(src))
	for _, ks := range kernelSets() {
		b.Run(ks.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)) * LabelSize)
			for b.Loop() {
				ks.encrypt(k, dst, src)
			}
			b.ReportMetric(float64(len(src))*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}
