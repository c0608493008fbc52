//go:build !amd64 || purego

package pps

const hasChaChaX16 = false

var chachaX16AVX512 = false

func chachaX16Variants() (avx512, avx2 bool) { return false, false }

func chacha20x16(*[16]uint32, *[256]uint32) { panic("pps: no 16-way ChaCha20 on this platform") }
