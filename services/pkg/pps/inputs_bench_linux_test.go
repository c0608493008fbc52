//go:build linux && amd64 && !purego

package pps

import (
	"syscall"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/gc"
)

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGarblerInputsTable2 is the garbler's input side of one Table 2 tick before the
// identity gates: 9 × 288 slots' label pairs derived from their round seeds and placed as
// gc.Inputs, one slot in 64 nullified. pairs: session 13's path (ValueLabels into a pair
// array, then GarblerInputsParallel copying them on 2 goroutines); pairs-xcrypto: the same
// with x/crypto's pure-Go ChaCha20 (what it ran on a CPU without AVX-512 before the AVX2
// version); derived: ValueInputs straight into the inputs, completed in place by
// GarblerInputsDerived. Reports the
// process's CPU per op (cpu-ms), which the shared machine's load does not inflate as it does
// wall time.
func BenchmarkGarblerInputsTable2(b *testing.B) {
	const n = 9 * 288
	seeds := make([]Seed, n)
	for s := range seeds {
		seeds[s][0], seeds[s][1], seeds[s][2] = byte(s), byte(s>>8), 0x5A
	}
	nulls := map[int]NullReason{}
	for s := 0; s < n; s += 64 {
		nulls[s] = Missing
	}
	a, err := Nullify(layoutOf(n, 1, 0), nulls)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, op func()) {
		c0 := processCPU(b)
		for b.Loop() {
			op()
		}
		b.ReportMetric(float64(processCPU(b)-c0)/float64(time.Millisecond)/float64(b.N), "cpu-ms")
	}
	pairsPath := func() {
		pairs := make([][ValueBits]LabelPair, n)
		for s := range n {
			pairs[s] = ValueLabels(&seeds[s], 0)
		}
		in, err := GarblerInputsParallel(a, func(s int) (*[ValueBits]LabelPair, error) { return &pairs[s], nil }, 2)
		if err != nil {
			b.Fatal(err)
		}
		clear(in)
	}
	b.Run("pairs-xcrypto", func(b *testing.B) {
		defer func(v bool) { hasChaChaX16 = v }(hasChaChaX16)
		hasChaChaX16 = false
		run(b, pairsPath)
	})
	b.Run("pairs", func(b *testing.B) {
		run(b, pairsPath)
	})
	b.Run("derived", func(b *testing.B) {
		run(b, func() {
			in := make([]gc.Input, a.layout.InputWires())
			for s := range n {
				if a.reasons[s] == Valid {
					ValueInputs(&seeds[s], 0, in[s*ValueBits:])
				}
			}
			in, err := GarblerInputsDerived(a, in, func(s int) bool { return a.reasons[s] == Valid }, nil)
			if err != nil {
				b.Fatal(err)
			}
			clear(in)
		})
	})
}
