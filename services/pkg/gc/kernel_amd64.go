//go:build !purego

package gc

func bestKernels() kernels { return genericKernels }
