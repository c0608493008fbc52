package lois

import (
	"syscall"
	"unsafe"
)

// hugeMin is the size from which a table array asks the kernel for transparent huge pages.
// A CI's table of 10⁶ entries spans ≈ 27 MB: with 4 KiB pages every lookup's random lines
// also miss the TLB, and the page walk is itself a cache miss. With THP in "madvise" mode (the
// common default, and this machine's) the Go heap gets none, so the arrays are advised here.
// The advice covers the 2 MiB-aligned interior of the allocation; the memory stays the Go
// heap's (no munmap, no lifetime of its own), and a kernel without THP ignores the call.
const hugeMin = 4 << 20

func adviseHuge(p unsafe.Pointer, size uintptr) {
	if size < hugeMin {
		return
	}
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + size) &^ (huge - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; best effort
}
