package sddr

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the benchmark thread's own CPU time: the machine is shared, and wall time
// per op includes time the thread is descheduled. Work the runtime does on other threads (GC)
// is not counted, which favours the allocation-heavy PSI baseline.
type cpuClock struct{ start, procStart time.Duration }

func startCPU() *cpuClock {
	runtime.LockOSThread()
	return &cpuClock{start: threadCPU(), procStart: processCPU()}
}

// report adds "cpu-ns/op" (and per-unit when unit > 1).
func (c *cpuClock) report(b *testing.B, per int, unit string) {
	d := threadCPU() - c.start
	runtime.UnlockOSThread()
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	// The whole process's CPU (user + system, every thread: the GC's work included), for
	// allocation-heavy code such as the PSI baseline.
	b.ReportMetric(float64((processCPU()-c.procStart).Nanoseconds())/float64(b.N), "proc-cpu-ns/op")
	if per > 1 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N*per), "cpu-ns/"+unit)
	}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
