package lois

// prefetch asks the CPU to start loading the cache line at addr without waiting for it (x86
// PREFETCHT0; it never faults). An ordinary load would hold its instruction at retirement for
// the whole miss, which is why a batch issues prefetches rather than early loads.
//
//go:noescape
func prefetch(addr uintptr)
