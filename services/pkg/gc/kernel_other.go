//go:build !amd64 || purego

package gc

func bestKernels() kernels { return genericKernels }

func extraKernels() []kernels { return nil }
