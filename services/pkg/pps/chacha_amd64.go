//go:build !purego

package pps

import "golang.org/x/sys/cpu"

//go:noescape
func chacha20x16AVX512(state *[16]uint32, lanes *[16]uint32, out *[256]uint32)

//go:noescape
func chacha20x8AVX2(state *[16]uint32, lanes *[8]uint32, out *uint32)

// hasChaChaX16 is whether chacha20x16 has an assembly version on this CPU: AVX-512F (16
// lanes in one pass) or AVX2 (two passes of 8 lanes, chosen at start-up).
var hasChaChaX16 = cpu.X86.HasAVX512F || cpu.X86.HasAVX2

// chachaX16AVX512 selects the AVX-512 version when the CPU has it; tests switch it off to
// check the AVX2 version on the same CPU.
var chachaX16AVX512 = cpu.X86.HasAVX512F

// chachaX16Variants names the assembly versions this CPU runs, AVX-512 first.
func chachaX16Variants() (avx512, avx2 bool) { return cpu.X86.HasAVX512F, cpu.X86.HasAVX2 }

func chacha20x16(state *[16]uint32, out *[256]uint32) {
	if chachaX16AVX512 {
		chacha20x16AVX512(state, &laneIndex, out)
		return
	}
	chacha20x8AVX2(state, &lanesLow, &out[0])
	chacha20x8AVX2(state, &lanesHigh, &out[8])
}

var (
	laneIndex = [16]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	lanesLow  = [8]uint32{0, 1, 2, 3, 4, 5, 6, 7}
	lanesHigh = [8]uint32{8, 9, 10, 11, 12, 13, 14, 15}
)
