//go:build !purego

package pps

import "golang.org/x/sys/cpu"

//go:noescape
func chacha20x16AVX512(state *[16]uint32, lanes *[16]uint32, out *[256]uint32)

var hasChaChaX16 = cpu.X86.HasAVX512F

func chacha20x16(state *[16]uint32, out *[256]uint32) {
	chacha20x16AVX512(state, &laneIndex, out)
}

var laneIndex = [16]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
