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
func encryptVAES(rk256 *[32]byte, dst, src *Label, n int)

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

// vaesKernels is aesniKernels with π on 256-bit registers (16 blocks in flight) for the
// batched hashes (identity gates). The AND kernels stay on AES-NI: their time goes to
// moving labels in and out of registers (σ, masks, gathers by slot index) as much as to
// AES rounds, and they already hold 8 blocks in flight.
var vaesKernels = func() kernels {
	k := aesniKernels
	k.name = "vaes"
	k.encrypt = func(k *fixedKey, dst, src []Label) {
		n := len(src) &^ 15
		if n > 0 {
			_ = dst[n-1]
			encryptVAES(&k.rk256[0], &dst[0], &src[0], n)
		}
		aesniKernels.encrypt(k, dst[n:], src[n:])
	}
	return k
}()

func hasAESNI() bool { return cpu.X86.HasAES && cpu.X86.HasSSE41 }

// hasVAES needs VAES (CPUID leaf 7, ECX bit 9), AVX2 and an OS that saves the upper halves
// of the registers (cpu reports AVX2 only when it does). x/sys/cpu reports VAES only
// together with AVX-512 (HasAVX512VAES), and the 256-bit form needs no AVX-512, so the
// bit is read here.
func hasVAES() bool {
	if !hasAESNI() || !cpu.X86.HasAVX2 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<9) != 0
}

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func bestKernels() kernels {
	switch {
	case hasVAES():
		return vaesKernels
	case hasAESNI():
		return aesniKernels
	}
	return genericKernels
}

// extraKernels are kernel sets this CPU can run besides bestKernels, for tests.
func extraKernels() []kernels {
	if hasVAES() {
		return []kernels{aesniKernels}
	}
	return nil
}
