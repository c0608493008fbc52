//go:build !purego

package gc

import "golang.org/x/sys/cpu"

//go:noescape
func encryptAESNI(rk *Label, dst, src *Label, n int)

//go:noescape
func garbleANDAESNI(rk *Label, c *andConsts, labels *Label, ops *uint32, n int, tab *byte, t uint64)

//go:noescape
func evalANDAESNI(rk *Label, c *andConsts, labels *Label, ops *uint32, n int, tab *byte, t uint64)

//go:noescape
func xorSSE(labels *Label, ops *uint32, n int)

var aesniKernels = kernels{
	name: "aesni",
	encrypt: func(k *fixedKey, dst, src []Label) {
		if len(src) > 0 {
			_ = dst[len(src)-1]
			encryptAESNI(&k.rk[0], &dst[0], &src[0], len(src))
		}
	},
	garbleAND: func(k *fixedKey, c *andConsts, L []Label, g []uint32, tab []byte, t uint64) {
		n := len(g) / 3
		if n == 0 {
			return
		}
		_ = tab[32*n-1]
		garbleANDAESNI(&k.rk[0], c, &L[0], &g[0], n, &tab[0], t)
	},
	evalAND: func(k *fixedKey, L []Label, g []uint32, tab []byte, t uint64) {
		n := len(g) / 3
		if n == 0 {
			return
		}
		_ = tab[32*n-1]
		evalANDAESNI(&k.rk[0], &evalConsts, &L[0], &g[0], n, &tab[0], t)
	},
	xor: func(L []Label, g []uint32) {
		if n := len(g) / 3; n > 0 {
			xorSSE(&L[0], &g[0], n)
		}
	},
}

func bestKernels() kernels {
	if cpu.X86.HasAES && cpu.X86.HasSSE41 {
		return aesniKernels
	}
	return genericKernels
}

// extraKernels are kernel sets this CPU can run besides bestKernels, for tests.
func extraKernels() []kernels {
	if b := bestKernels(); b.name != aesniKernels.name && cpu.X86.HasAES && cpu.X86.HasSSE41 {
		return []kernels{aesniKernels}
	}
	return nil
}
