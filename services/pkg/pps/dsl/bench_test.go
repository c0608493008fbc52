package dsl

import (
	"fmt"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/pps"
)

// BenchmarkCompile measures compiling each builtin block over n inputs and reports its
// circuit's AND gates (32 garbled bytes each) and ANDs per input value.
func BenchmarkCompile(b *testing.B) {
	for _, block := range blocks {
		for _, n := range []int{10, 100} {
			src := blockSource(block, n)
			b.Run(fmt.Sprintf("%s/%d", block, n), func(b *testing.B) {
				var f *Function
				for b.Loop() {
					var err error
					if f, err = Compile(src); err != nil {
						b.Fatal(err)
					}
				}
				ands := f.Circuit.ANDCount()
				b.ReportMetric(float64(ands), "ANDs")
				b.ReportMetric(float64(ands)/float64(len(f.Layout.Slots)), "ANDs/value")
			})
		}
	}
}

// BenchmarkModel measures the plaintext model (the reference every circuit is tested against).
func BenchmarkModel(b *testing.B) {
	f, err := Compile(blockSource("variance", 100))
	if err != nil {
		b.Fatal(err)
	}
	values := make([]pps.Fixed, len(f.Layout.Slots))
	valid := make([]bool, len(values))
	for i := range values {
		values[i], valid[i] = pps.FixedFromInt(i), true
	}
	for b.Loop() {
		if _, err := f.Model(values, valid); err != nil {
			b.Fatal(err)
		}
	}
}
